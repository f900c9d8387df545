#!/usr/bin/env python3
"""clang-tidy over SOURCES, skipping each source whose exact input was found clean before.

    tools/dev/tidy_cached.py BUILD_DIR SOURCE...

A source's input is everything clang-tidy reads for it: the source preprocessed with its compile
command from BUILD_DIR/compile_commands.json (every header it includes, ours and the system's, at
their current contents), the command itself, .clang-tidy and clang-tidy's version. Its SHA-256 is
the key; a source found clean leaves the key in the cache directory ($STOKER_TIDY_CACHE, else
$XDG_CACHE_HOME/stoker-tidy, else ~/.cache/stoker-tidy: outside the clone, so that CI's next run
on this machine finds it). Only clean results are kept, so a finding is reported on every run until
it is fixed, and anything that changes what clang-tidy would see runs it again. Runs clang-tidy on
the others, as many at once as there are cores; prints its findings and exits 1 when there are any.
"""

import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys


def cache_dir():
    if os.environ.get("STOKER_TIDY_CACHE"):
        return os.environ["STOKER_TIDY_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "stoker-tidy")


def preprocess_command(entry):
    """The entry's compile command, made to write the preprocessed source to stdout."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    if out and os.path.basename(out[0]) == "ccache":
        out = out[1:]
    return out + ["-E", "-o", "-"]


def key_of(entry, salt):
    h = hashlib.sha256(salt)
    h.update(entry["file"].encode() + b"\0" + entry.get("command", " ".join(entry.get("arguments", []))).encode())
    pre = subprocess.run(
        preprocess_command(entry),
        cwd=entry["directory"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    if pre.returncode != 0:
        return None  # clang-tidy will say what is wrong
    h.update(pre.stdout)
    return h.hexdigest()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    build, sources = sys.argv[1], sys.argv[2:]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = {os.path.realpath(e["file"]): e for e in json.load(f)}
    version = subprocess.run(["clang-tidy", "--version"], stdout=subprocess.PIPE, check=True).stdout
    with open(".clang-tidy", "rb") as f:
        salt = version + b"\0" + f.read()
    cache = cache_dir()
    os.makedirs(cache, exist_ok=True)

    def tidy(source):
        entry = entries.get(os.path.realpath(source))
        key = key_of(entry, salt) if entry else None
        if key and os.path.exists(os.path.join(cache, key)):
            return source, True, ""
        run = subprocess.run(
            ["clang-tidy", "-p", build, "--quiet", source],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        clean = run.returncode == 0 and not any(
            (" warning: " in line or " error: " in line) for line in run.stdout.splitlines()
        )
        if clean and key:
            with open(os.path.join(cache, key), "w"):
                pass
        return source, False, "" if clean else run.stdout

    found, cached = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for source, was_cached, findings in pool.map(tidy, sources):
            cached += was_cached
            if findings:
                found.append(findings)
    print(
        f"tidy_cached: {len(sources) - cached} sources run through clang-tidy, {cached} found clean before "
        f"(cache {cache})",
        file=sys.stderr,
    )
    if found:
        lines = sorted(
            {line for text in found for line in text.splitlines() if " warning: " in line or " error: " in line}
        )
        print("\n".join(lines), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
