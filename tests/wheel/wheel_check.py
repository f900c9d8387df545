"""The wheel tools/build-wheel.sh makes, installed into a fresh virtualenv and run where the system's
copies of the libraries stoker links cannot be loaded.

usage: wheel_check.py SOURCE_DIR BUILD_PYTHON_DIR STOKER_PACK SCRATCH_DIR
(1) tools/build-wheel.sh builds and repairs a wheel tagged manylinux, which carries libstoker,
stoker-worker and, in stoker.libs/, the libraries they need beyond manylinux's allow-list;
(2) it installs into a fresh virtualenv with pip, offline, in seconds; (3) in a mount namespace
where every HDF5, LMDB, libjpeg-turbo, libspng, libdeflate, xxhash, fmt, Boost, libaec/szip and
curl library of the system is an empty file, `ldd` finds everything the package's ELF files need
inside the wheel or in the manylinux policy's allow-list (auditwheel's own), and (4) a Loader with
two workers and a decoding pipeline delivers, as numpy arrays, exactly the batches the build
tree's package (BUILD_PYTHON_DIR, built against the system's libraries) delivers, its workers
running the wheel's stoker-worker; (5) the README's
training loop runs on a folder of JPEGs packed by stoker-pack (on the CPU, for one epoch, as
tests/python/test_readme.py changes it), torch coming from the .venv.
Exit status 77 (skipped) where no mount namespace can be made (not root).
"""

import glob
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile

import numpy as np
from PIL import Image

SOURCE, BUILD_PYTHON, PACK, SCRATCH = sys.argv[1:5]
VENV_PYTHON = os.path.join(SOURCE, ".venv", "bin", "python")
failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        if detail:
            print("     " + str(detail).replace("\n", "\n     "))
        failures.append(what)
    return ok


def run(args, **kwargs):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=1200, **kwargs)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        return subprocess.CompletedProcess(args, 124, out, err + f"\n(ended after {e.timeout} s)")


# Where the system keeps the libraries (Debian's multiarch directory), and those of stoker's
# dependencies that the namespace hides: none of them is one Python, numpy or torch loads.
LIBDIR = os.path.join("/usr/lib", sysconfig.get_config_var("MULTIARCH") or "")
HIDDEN = (
    "libhdf5",
    "liblmdb",
    "libjpeg",
    "libturbojpeg",
    "libspng",
    "libdeflate",
    "libxxhash",
    "libfmt",
    "libboost",
    "libsz",
    "libaec",
    "libcurl",
)


def allowed_libraries(tag):
    """The manylinux policy's allow-list for `tag` (manylinux_2_35_x86_64), as auditwheel has it."""
    import auditwheel

    with open(os.path.join(os.path.dirname(auditwheel.__file__), "policy", "manylinux-policy.json")) as f:
        policies = json.load(f)
    (policy,) = [p for p in policies if tag.startswith(p["name"] + "_") or tag == p["name"]]
    return set(policy.get("lib_whitelist", policy.get("lib_allowlist", [])))


shutil.rmtree(SCRATCH, ignore_errors=True)
os.makedirs(SCRATCH)
probe = os.path.join(SCRATCH, "probe")
open(probe, "w").close()
if run(["unshare", "-m", "--propagation", "private", "mount", "--bind", "/dev/null", probe]).returncode != 0:
    print("wheel_check: cannot bind-mount in a mount namespace here (unshare -m needs root): skipped")
    sys.exit(77)

# (1) The wheel.
dist = os.path.join(SCRATCH, "dist")
t0 = time.monotonic()
p = run([os.path.join(SOURCE, "tools", "build-wheel.sh"), dist, VENV_PYTHON], cwd=SOURCE)
if not check(p.returncode == 0, "tools/build-wheel.sh builds and repairs a wheel", p.stdout[-3000:] + p.stderr[-6000:]):
    sys.exit(1)
print(f"     built and repaired in {time.monotonic() - t0:.0f} s")
(wheel,) = glob.glob(os.path.join(dist, "stoker-*.whl"))
name = os.path.basename(wheel)
tag = re.search(r"-(manylinux_2_\d+_\w+)\.whl$", name)
check(tag is not None, f"tagged manylinux: {name}")
ALLOWED = allowed_libraries(tag.group(1)) if tag else set()
members = zipfile.ZipFile(wheel).namelist()
for want in ("stoker/libstoker.so.0", "stoker/_bin/stoker-worker", "stoker/__init__.py"):
    check(want in members, f"the wheel holds {want}")
grafted = sorted(os.path.basename(m) for m in members if m.startswith("stoker.libs/"))
for lib in ("libhdf5", "liblmdb", "libjpeg", "libspng", "libdeflate", "libxxhash"):
    check(any(g.startswith(lib) for g in grafted), f"stoker.libs/ carries {lib}", grafted)
show = run([VENV_PYTHON, "-m", "auditwheel", "show", wheel])
check(
    show.returncode == 0 and "manylinux" in show.stdout, "auditwheel show: consistent with a manylinux tag", show.stdout
)
print("     " + " ".join(show.stdout.split())[:400])

# (2) A fresh virtualenv, offline.
venv = os.path.join(SCRATCH, "venv")
p = run(["/usr/bin/python3", "-m", "venv", venv])
check(p.returncode == 0, "a fresh virtualenv", p.stderr)
python = os.path.join(venv, "bin", "python")
t0 = time.monotonic()
p = run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheel])
seconds = time.monotonic() - t0
check(p.returncode == 0, f"pip installs the wheel offline ({seconds:.1f} s)", p.stderr)
site = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
venv_site = run([VENV_PYTHON, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
# numpy and torch from the .venv, after the fresh site-packages: its own stoker is the wheel's.
with open(os.path.join(site, "zz_project_venv.pth"), "w") as f:
    f.write(venv_site + "\n")
package = os.path.join(site, "stoker")

# Data: a folder of JPEGs packed by stoker-pack (made with the system's libraries, outside).
rng = np.random.default_rng(8)
for c, cls in enumerate(["cat", "dog", "emu"]):
    os.makedirs(os.path.join(SCRATCH, "train", cls))
    for i in range(7):
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, size=(20 + 4 * i, 24, 3), dtype=np.uint8)).save(out, "JPEG", quality=90)
        with open(os.path.join(SCRATCH, "train", cls, f"{c}{i}.jpg"), "wb") as fh:
            fh.write(out.getvalue())
p = run([PACK, "--folder", "train", "train.lmdb", "--quiet"], cwd=SCRATCH)
check(p.returncode == 0, "stoker-pack packs the folder", p.stderr)

LOAD = r"""
import json, os, sys, numpy as np, stoker
loader = stoker.Loader("train.lmdb", batch_size=4, num_workers=2, shuffle=True, seed=3, framework="numpy",
                       pipeline="image=decode,resize(8,8),to_chw")
batches = [{k: v.tolist() for k, v in b.items()} for b in loader]
exes = sorted({os.path.realpath(f"/proc/{pid}/exe") for pid in loader.worker_pids()})
maps = sorted({line.split()[-1] for pid in loader.worker_pids() for line in open(f"/proc/{pid}/maps")
               if ".so" in line.split()[-1]})
print(json.dumps({"stoker": stoker.__file__, "batches": batches, "workers": exes, "maps": maps,
                  "classes": loader.metadata["labels"]["label"]}))
"""
with open(os.path.join(SCRATCH, "load.py"), "w") as f:
    f.write(LOAD)
reference = run([VENV_PYTHON, "load.py"], cwd=SCRATCH, env=dict(os.environ, PYTHONPATH=BUILD_PYTHON))
check(reference.returncode == 0, "the build tree's stoker loads the packed folder", reference.stderr)

# (3)-(5) in a mount namespace that hides the system's libraries.
hidden = sorted(
    path
    for path in glob.glob(os.path.join(LIBDIR, "*.so*"))
    if os.path.basename(path).startswith(HIDDEN) and os.path.isfile(path) and not os.path.islink(path)
)
check(len(hidden) >= 6, f"{len(hidden)} system libraries to hide", hidden)
empty = os.path.join(SCRATCH, "empty")
open(empty, "w").close()
sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))
from test_readme import changed, first_training_loop  # noqa: E402

loop = first_training_loop()
loop = changed(loop, 'device="cuda"', 'device="cpu"')
loop = changed(loop, ".cuda()", "")
loop = changed(loop, "range(start, 90)", "range(start, 1)")
with open(os.path.join(SCRATCH, "loop.py"), "w") as f:
    f.write(loop)
elves = sorted(
    os.path.join(root, n)
    for root, _, names in os.walk(package)
    for n in names
    if n.endswith(".so") or ".so." in n or n == "stoker-worker"
)
elves += sorted(glob.glob(os.path.join(site, "stoker.libs", "*")))
script = "\n".join(
    [
        "set -e",
        *(f"mount --bind {shlex.quote(empty)} {shlex.quote(path)}" for path in hidden),
        *(f"echo '== {e}'; ldd {shlex.quote(e)}" for e in elves),
        f"echo '== load'; {shlex.quote(python)} load.py",
        f"echo '== loop'; {shlex.quote(python)} loop.py",
    ]
)
inside = run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], cwd=SCRATCH)
sections = {}
for part in inside.stdout.split("== ")[1:]:
    head, _, body = part.partition("\n")
    sections[head.strip()] = body
check(inside.returncode == 0, "everything runs in the namespace", inside.stdout[-3000:] + inside.stderr[-3000:])

for e in elves:
    body = sections.get(e, "")
    outside = []
    for line in body.splitlines():
        line = line.strip()
        if "=>" not in line:
            continue
        soname, where = line.split("=>", 1)
        where = where.split("(")[0].strip()
        if "not found" in line or not (where.startswith(site) or soname.strip() in ALLOWED):
            outside.append(line)
    check(
        body != "" and not outside, f"ldd {os.path.relpath(e, site)}: all inside the wheel or allowed", outside or body
    )

if "load" in sections and reference.returncode == 0:
    try:
        got = json.loads(sections["load"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        got = None
    want = json.loads(reference.stdout.strip().splitlines()[-1])
    if check(got is not None, "the Loader runs from the wheel", sections["load"][-2000:]):
        check(got["stoker"].startswith(package), f"the stoker imported is the wheel's: {got['stoker']}")
        check(
            got["batches"] == want["batches"] and len(got["batches"]) == 6,
            "two workers and the decoding pipeline deliver exactly the build tree's batches",
        )
        check(got["classes"] == ["cat", "dog", "emu"], "the class names stored by stoker-pack")
        check(
            got["workers"] == [os.path.join(os.path.realpath(package), "_bin", "stoker-worker")],
            f"the workers run the wheel's stoker-worker: {got['workers']}",
        )
        check(
            not any(m.startswith(LIBDIR) and os.path.basename(m).startswith(HIDDEN) for m in got["maps"]),
            "no worker maps a system copy of a hidden library",
            got["maps"],
        )
check("loop" in sections and sections["loop"].strip() != "", "the README's loop trains an epoch and prints a verdict")
print("     " + sections.get("loop", "").strip()[:300])

sys.exit(1 if failures else 0)
