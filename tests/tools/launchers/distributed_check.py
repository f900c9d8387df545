"""loader-bench under real launchers (torchrun, Open MPI's mpirun): every rank's part of the epoch
exactly once, and a stop then an elastic resume that delivers exactly the rest.

usage: distributed_check.py LOADER_BENCH SCRATCH_DIR

Content digests (docs/digest.md) are sums mod 2^64 of per-sample hashes: the ranks' digests add
up to the whole epoch's exactly when their samples are disjoint and together are the epoch. The
dataset (1200 samples) and batch sizes are chosen so that no rank needs padding.
Exits 77 (skipped) when a launcher is not installed; CI installs both (tools/install-deps.sh).
"""

import json
import os
import shutil
import subprocess
import sys

N, SEED, EPOCH_BATCH = 1200, 3, 10
M64 = (1 << 64) - 1


def run(cmd, env=None, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if check and r.returncode != 0:
        sys.exit(f"FAILED ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r


def digest_sum(rows):
    return f"{sum(int(r['content_digest'], 16) for r in rows) & M64:016x}"


def main():
    bench, scratch = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    venv_bin = os.path.dirname(sys.executable)
    torchrun = os.path.join(venv_bin, "torchrun")
    mpirun = shutil.which("mpirun")
    if not os.path.exists(torchrun) or not mpirun:
        print(f"SKIP: torchrun ({torchrun}) or mpirun ({mpirun}) is not installed: run tools/install-deps.sh")
        return 77
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    run([bench, "--make-demo", scratch, "--demo-samples", str(N)])
    data = os.path.join(scratch, "demo.lmdb")
    common = ["--data", data, "--shuffle", "--seed", str(SEED), "--epochs", "1", "--digest", "--json"]
    # Launchers set no variables of their own for us to clear, but a CI job might run under one.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_"))
        and k not in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    }

    whole = json.loads(run([bench, *common, "--batch-size", str(EPOCH_BATCH), "--workers", "1"], env=env).stdout)
    assert whole["samples"] == N, whole

    def launch(launcher, ranks, name, args, state_out=None):
        """Runs loader-bench on `ranks` ranks; returns each rank's JSON row, in rank order. With
        `state_out`, rank r also writes its state to state_out.r.json."""
        out = os.path.join(scratch, name)
        # Each rank writes its own files: RANK under torchrun, OMPI_COMM_WORLD_RANK under mpirun.
        rank_var = "RANK" if launcher == "torchrun" else "OMPI_COMM_WORLD_RANK"
        script = 'exec "$0" "$@"' + (f' --state-out "{state_out}.${rank_var}.json"' if state_out else "")
        shell = ["sh", "-c", f'{script} > "{out}.${rank_var}.json"', bench, *common, "--shard-from-env", *args]
        if launcher == "torchrun":
            cmd = [torchrun, "--standalone", f"--nproc-per-node={ranks}", "--no-python", *shell]
        else:
            cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), *shell]
        run(cmd, env=env)
        rows = []
        for r in range(ranks):
            with open(f"{out}.{r}.json") as f:
                rows.append(json.loads(f.read()))
        for r, row in enumerate(rows):
            assert row["rank"] == r and row["world_size"] == ranks, (name, row)
        assert len({row["batches"] for row in rows}) == 1, f"{name}: ranks got different numbers of batches: {rows}"
        assert len({row["order_digest"] for row in rows}) == ranks, f"{name}: two ranks got the same samples"
        print(
            f"{name}: {ranks} ranks x {rows[0]['batches']} batches, samples {[row['samples'] for row in rows]}, "
            f"content digests add up to {digest_sum(rows)}"
        )
        return rows

    # 1. Every rank's part exactly once.
    for launcher, ranks in (("torchrun", 2), ("torchrun", 3), ("mpirun", 2), ("mpirun", 4)):
        rows = launch(launcher, ranks, f"{launcher}{ranks}", ["--batch-size", str(EPOCH_BATCH), "--workers", "1"])
        assert sum(row["samples"] for row in rows) == N
        assert digest_sum(rows) == whole["content_digest"], f"{launcher} x{ranks}: the ranks' samples are not the epoch"

    # 2. Preempted after 7 batches on 3 torchrun ranks (batch 10, 1 worker): 210 samples consumed.
    stopped = launch(
        "torchrun",
        3,
        "stopped",
        ["--batch-size", "10", "--workers", "1", "--stop-after-batches", "7"],
        state_out=os.path.join(scratch, "state"),
    )
    states = []
    for r in range(3):
        with open(os.path.join(scratch, f"state.{r}.json")) as f:
            states.append(f.read())
    assert len(set(states)) == 1, f"ranks saved different states: {states}"
    assert json.loads(states[0])["consumed"] == 210, states[0]
    state = os.path.join(scratch, "state.0.json")
    # ... resumed on 2 mpirun ranks with another batch size and worker count: exactly the rest.
    resumed = launch("mpirun", 2, "resumed", ["--batch-size", "9", "--workers", "2", "--resume", state])
    assert sum(r["samples"] for r in stopped) == 210 and sum(r["samples"] for r in resumed) == N - 210
    assert all(r["resumed_from"] == 210 and r["consumed"] == N for r in resumed), resumed
    assert digest_sum(stopped + resumed) == whole["content_digest"], "stop + resume is not the epoch"

    # 3. Bad input: a clear error, exit 1 (2 for usage), nothing delivered.
    def refused(args, extra_env, expect, code=1):
        r = run([bench, *common, "--batch-size", "10", *args], env={**env, **extra_env}, check=False)
        assert r.returncode == code and expect in r.stderr and r.stdout == "", (args, extra_env, r.returncode, r.stderr)
        print(f"refused: {expect!r}")

    other = os.path.join(scratch, "other-seed.json")
    run(
        [
            bench,
            *common[:3],
            "--seed",
            "4",
            "--epochs",
            "1",
            "--json",
            "--batch-size",
            "10",
            "--stop-after-batches",
            "1",
            "--state-out",
            other,
        ],
        env=env,
    )
    refused(["--resume", other], {}, "seed 4 in the state, 3 here")
    edited = os.path.join(scratch, "edited.json")
    with open(edited, "w") as f:
        f.write(states[0].replace('"consumed":210', '"consumed":200'))
    refused(["--resume", edited], {}, "edited or damaged")
    with open(edited, "w") as f:
        f.write(states[0][: len(states[0]) // 2])
    refused(["--resume", edited], {}, "truncated")
    finished = os.path.join(scratch, "finished.json")
    run([bench, *common, "--batch-size", "100", "--state-out", finished], env=env)
    refused(["--resume", finished], {}, "is finished")
    refused(["--shard-from-env"], {"RANK": "3", "WORLD_SIZE": "2"}, "RANK=3 is not below WORLD_SIZE=2")
    refused(["--shard-from-env"], {"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0")
    refused(["--shard-from-env"], {"RANK": "0", "WORLD_SIZE": "2", "PMI_RANK": "1", "PMI_SIZE": "2"}, "conflict")
    refused(["--shard-from-env"], {}, "no launcher's variables are set")
    refused(["--resume", os.path.join(scratch, "missing.json")], {}, "missing.json: No such file")
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
