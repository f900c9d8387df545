"""op_libraries=: a library of pipeline operations built against the package's CMake files
(examples/user_op) and loaded into the Loader and its workers."""

import os
import shutil
import subprocess

import numpy as np
import pytest
import stoker
import transforms

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "user_op")


@pytest.fixture(scope="module")
def gain_library(tmp_path_factory):
    cmake = shutil.which("cmake")
    assert cmake, "cmake is needed to build an operation library (tools/install-deps.sh installs it)"
    build = tmp_path_factory.mktemp("user-op")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        [
            cmake,
            "-S",
            EXAMPLE,
            "-B",
            str(build),
            *generator,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_PREFIX_PATH={stoker.cmake_prefix_path}",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run([cmake, "--build", str(build)], check=True, capture_output=True)
    return str(build / "libstoker_user_op.so")


def batches(loader):
    it = iter(loader)
    return [(list(it.indices), np.array(b["data"])) for b in it]


def test_the_cmake_dir_is_the_packages(capsys):
    from stoker.__main__ import main

    main(["--cmake-dir"])
    assert capsys.readouterr().out.strip() == stoker.cmake_prefix_path
    assert os.path.isfile(os.path.join(stoker.cmake_prefix_path, "stoker", "stokerConfig.cmake"))


@pytest.mark.parametrize("workers", [0, 2])
def test_an_operation_from_a_library_runs_in_the_loader_and_its_workers(data, gain_library, workers):
    loader = stoker.Loader(
        data["jpegs"],
        pipeline="data=decode(16,20),gain(2,2)",
        op_libraries=[gain_library],
        batch_size=5,
        num_workers=workers,
        framework="numpy",
    )
    plain = stoker.Loader(data["jpegs"], pipeline="data=decode(16,20)", batch_size=5, framework="numpy")
    for (indices, got), (want_indices, decoded) in zip(batches(loader), batches(plain)):
        assert indices == want_indices
        np.testing.assert_array_equal(got, np.minimum(decoded.astype(np.int64) * 2, 255).astype(np.uint8))


def test_its_random_draws_are_the_same_for_any_worker_count(data, gain_library):
    runs = [
        batches(
            stoker.Loader(
                data["jpegs"],
                pipeline="data=decode(16,20),gain(0.5,1.5)",
                op_libraries=[gain_library],
                batch_size=4,
                num_workers=w,
                shuffle=True,
                seed=3,
                framework="numpy",
            )
        )
        for w in (0, 2)
    ]
    assert [i for i, _ in runs[0]] == [i for i, _ in runs[1]]
    for (_, a), (_, b) in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_a_transform_hosts_workers_that_load_it_too(data, gain_library):
    loader = stoker.Loader(
        data["jpegs"],
        pipeline="data=decode(16,20),gain(2,2)",
        op_libraries=[gain_library],
        batch_size=6,
        num_workers=2,
        framework="numpy",
        transform=transforms.decoded_mean,
    )
    plain = stoker.Loader(
        data["jpegs"],
        pipeline="data=decode(16,20),gain(2,2)",
        op_libraries=[gain_library],
        batch_size=6,
        framework="numpy",
    )
    it = iter(loader)
    for batch, want in zip(it, plain):
        np.testing.assert_allclose(
            batch["mean"], np.array(want["data"]).reshape(len(it.indices), -1, 3).mean(axis=1), rtol=1e-6
        )


def test_a_library_that_cannot_be_loaded_is_named_with_the_loaders_reason(data, tmp_path):
    missing = str(tmp_path / "libnothere.so")
    with pytest.raises(stoker.Error, match=r"op_libraries: .*libnothere.so: cannot be loaded: .*No such file") as e:
        stoker.Loader(data["jpegs"], op_libraries=[missing], num_workers=1)
    assert e.value.code == "invalid_option"
    not_elf = tmp_path / "libtext.so"
    not_elf.write_text("not a library")
    with pytest.raises(stoker.Error, match="libtext.so: cannot be loaded: .*(invalid ELF header|too short)"):
        stoker.Loader(data["jpegs"], op_libraries=[str(not_elf)])
    with pytest.raises(stoker.Error, match=r"name it by a path \(\"\./libgain.so\"\)"):
        stoker.Loader(data["jpegs"], op_libraries=["libgain.so"])


def test_a_library_that_registers_nothing_is_named(data):
    libm = next(
        p
        for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6")
        if os.path.exists(p)
    )
    with pytest.raises(stoker.Error, match="libm.so.6: registers no pipeline operation"):
        stoker.Loader(data["jpegs"], op_libraries=[libm])
