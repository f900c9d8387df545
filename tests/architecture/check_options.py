#!/usr/bin/env python3
"""Every member of stoker::Options reaches the Python package and loader-bench, with its default.

    check_options.py SOURCE_DIR LOADER_BENCH              (PYTHONPATH: the built package)
    check_options.py --self-test SOURCE_DIR LOADER_BENCH  (a member added to a copy of options.h
                                                           must be named as missing everywhere)

Reads the members of `struct Options` from include/stoker/options.h and checks that each one is
  - a keyword of stoker.Loader, in its signature and in python/stoker/__init__.pyi, where the
    stub's default is the one the package uses;
  - a member of _core.Options (the binding of stoker::Options itself);
  - a flag of `loader-bench --help`;
under its own name, or under the name EXCEPTIONS below gives it (with the reason where it has none).
Exits 1 naming every member that does not, 0 when all do.
"""

import ast
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Members spelt otherwise somewhere, or absent there for a reason: {member: {place: name or None}}.
# place: "python" (the Loader's keyword), "core" (_core.Options' attribute), "bench" (the flag).
EXCEPTIONS = {
    "source": {"bench": "--data"},
    "sources": {"python": "source", "core": "sources", "bench": "--data"},  # a list of shards
    "mix": {"python": "sources"},  # sources=[stoker.Source(path, weight=w), ...]
    "prefetch": {"python": "prefetch_factor"},  # DataLoader's name
    "num_workers": {"bench": "--workers"},
    "op_libraries": {"bench": "--op-library"},  # repeated, one path each
    "shard": {"core": "shard_rank", "bench": "--shard-from-env"},  # the tool takes the launcher's
    "timeout": {"core": "timeout_s"},  # seconds
    "shutdown_grace": {"core": "shutdown_grace_s"},
    "fetch_timeout": {"core": "fetch_timeout_s"},
    "transform": {"core": "set_transform", "bench": None},  # a function of the user's: no flag
    "on_warning": {"python": None, "core": None, "bench": None},  # Python's warnings; the tool's stderr
}
# Defaults that are the package's own, not the library's.
OWN_DEFAULTS = {"held_batches"}

MEMBER = re.compile(r"^  (?!//)[A-Za-z0-9_:<>,() ]+?[ &*]([a-z_][a-z0-9_]*)(?:\s*=\s*[^;]+|\{[^;]*\})?;")


def option_members(options_h):
    with open(options_h, encoding="utf-8") as f:
        text = f.read()
    body = text[text.index("struct Options {") : text.index("\n};", text.index("struct Options {"))]
    return [m.group(1) for m in map(MEMBER.match, body.splitlines()) if m]


def stub_keywords(pyi):
    """The stub's Loader.__init__ keywords and their defaults (as Python values where literal)."""
    with open(pyi, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Loader":
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    args = fn.args.args[1:] + fn.args.kwonlyargs
                    defaults = [None] * (len(fn.args.args[1:]) - len(fn.args.defaults)) + fn.args.defaults
                    defaults += fn.args.kw_defaults
                    out = {}
                    for a, d in zip(args, defaults):
                        try:
                            out[a.arg] = ast.literal_eval(d) if d is not None else inspect.Parameter.empty
                        except ValueError:
                            out[a.arg] = "<expression>"
                    return out
    return {}


def bench_flags(loader_bench):
    """`loader-bench --help`'s flags. (Their defaults are the library's by construction: each flag
    writes into a stoker::Options, tools/loader_bench/bench_args.h.)"""
    text = subprocess.run([loader_bench, "--help"], capture_output=True, text=True, check=True).stdout
    return {m.group(1) for m in (re.match(r"^\s+(--[a-z0-9-]+)", line) for line in text.splitlines()) if m}


def check(source_dir, loader_bench, options_h=None):
    import stoker
    from stoker import _core

    members = option_members(options_h or os.path.join(source_dir, "include", "stoker", "options.h"))
    if len(members) < 30:
        print(f"check_options: found only {len(members)} members of struct Options: the parse is broken")
        return 1
    signature = inspect.signature(stoker.Loader.__init__).parameters
    stub = stub_keywords(os.path.join(source_dir, "python", "stoker", "__init__.pyi"))
    core = _core.Options()
    flags = bench_flags(loader_bench)
    problems = []
    for m in members:
        names = {place: EXCEPTIONS.get(m, {}).get(place, m) for place in ("python", "core", "bench")}
        if "bench" not in EXCEPTIONS.get(m, {}):
            names["bench"] = "--" + m.replace("_", "-")
        py, attr, flag = names["python"], names["core"], names["bench"]
        if py is not None:
            if py not in signature:
                problems.append(f"Options::{m}: stoker.Loader has no keyword '{py}'")
            elif py not in stub:
                problems.append(f"Options::{m}: python/stoker/__init__.pyi's Loader has no keyword '{py}'")
            elif stub[py] != signature[py].default and stub[py] != "<expression>":
                problems.append(
                    f"Options::{m}: python/stoker/__init__.pyi gives '{py}' the default {stub[py]!r}, "
                    f"the package {signature[py].default!r}"
                )
            elif (
                py == m
                and m not in OWN_DEFAULTS
                and hasattr(core, m)
                and signature[py].default not in (None, inspect.Parameter.empty, getattr(core, m))
            ):
                problems.append(
                    f"Options::{m}: stoker.Loader's default {signature[py].default!r} is not the library's "
                    f"{getattr(core, m)!r}"
                )
        if attr is not None and not hasattr(core, attr):
            problems.append(f"Options::{m}: _core.Options has no '{attr}' (python/src/py_options.cc)")
        if flag is not None:
            if flag not in flags:
                problems.append(f"Options::{m}: loader-bench has no flag {flag} (tools/loader_bench/bench_args.cc)")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s): an option of stoker::Options that does not reach everywhere")
        return 1
    print(f"{len(members)} members of stoker::Options reach stoker.Loader, its stub, _core.Options and loader-bench")
    return 0


def self_test(source_dir, loader_bench):
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "options.h")
        shutil.copy(os.path.join(source_dir, "include", "stoker", "options.h"), copy)
        with open(copy, encoding="utf-8") as f:
            text = f.read()
        text = text.replace("struct Options {\n", "struct Options {\n  std::size_t brand_new_option = 1;\n", 1)
        with open(copy, "w", encoding="utf-8") as f:
            f.write(text)
        run = subprocess.run(
            [sys.executable, __file__, "--options-h", copy, source_dir, loader_bench], capture_output=True, text=True
        )
        wanted = [
            "Options::brand_new_option: stoker.Loader has no keyword 'brand_new_option'",
            "Options::brand_new_option: _core.Options has no 'brand_new_option'",
            "Options::brand_new_option: loader-bench has no flag --brand-new-option",
        ]
        if run.returncode != 1 or any(w not in run.stdout for w in wanted):
            print(f"self-test: expected exit 1 naming brand_new_option thrice, got {run.returncode}:")
            print(run.stdout + run.stderr)
            return 1
        print("self-test: a new member of Options is reported as:\n  " + "\n  ".join(wanted))
        return 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["--self-test"]:
        sys.exit(self_test(*argv[1:3]))
    if argv[:1] == ["--options-h"]:
        sys.exit(check(argv[2], argv[3], options_h=argv[1]))
    sys.exit(check(argv[0], argv[1]))
