#!/usr/bin/env python3
"""The module arrows of docs/architecture.md, held against the code.

    check_layering.py SOURCE_DIR
    check_layering.py --self-test SOURCE_DIR   (the check fails, naming file and line, on a forbidden
                                                include planted in a copy of the table's modules)
    check_layering.py --picture SOURCE_DIR     (prints the picture the table implies, its arrows
                                                through another module left out, to paste in)

Reads the table of modules (module, what it owns, may include) and the Mermaid picture from
docs/architecture.md, then checks that
  - every `#include "..."` in a module's files names a public header (include/stoker/, where
    stoker/torch.h is only for torch_adapter), a header of the same module, or one of a module its
    row allows; a violation is reported as FILE:LINE with the module and what its row allows;
  - every folder of base/, loader/, formats/ and tools/ that holds code is a module of the table;
  - the house's floors hold: base/ (the ground floor) may include no module, and formats/ none of
    loader/ (a reader knows nothing of the Loader);
  - the table's arrows have no cycle;
  - the picture draws only arrows of the table, and implies every arrow of the table;
  - no source file (C++ or Python) of base/, loader/, formats/, tools/, python/, include/ or
    examples/ is longer than 500 lines (a file is one concept; past that it holds two). Functions
    are held to 80 lines by clang-tidy (.clang-tidy, tools/dev/lint.sh).
Exits 1 with every problem listed, 0 when there is none.
"""

import os
import re
import sys

ROW = re.compile(r"^\| `([a-z0-9_/]+)` \|[^|]*\| ([^|]*) \|\s*$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
NODE = re.compile(r'^\s*(\w+)\["([^"]+)"\]\s*$')
EDGE = re.compile(r"^\s*(\w+)\s*-->\s*(\w+)\s*$")
CODE = (".h", ".cc", ".cpp")
SOURCE = CODE + (".py", ".pyi")
# Folders whose code the table governs; bench/, tests/, fuzz/ and examples/ may include anything.
GOVERNED = ("base", "loader", "formats", "torch_adapter", "tools")
MAX_LINES = 500
SIZED = GOVERNED + ("python", "include", "examples")
# The floors of the house: what a module under each may include, whatever the table says.
FLOORS = {"base": (), "formats": ("base", "formats")}


def read_architecture(path):
    allowed, picture, nodes = {}, set(), {}
    in_picture = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line)
            if m:
                module, deps = m.group(1), m.group(2)
                allowed[module] = set(re.findall(r"`([a-z0-9_/]+)`", deps))
                continue
            if line.startswith("```mermaid"):
                in_picture = True
                continue
            if in_picture and line.startswith("```"):
                in_picture = False
                continue
            if in_picture:
                n = NODE.match(line)
                if n:
                    nodes[n.group(1)] = n.group(2)
                e = EDGE.match(line)
                if e:
                    picture.add((e.group(1), e.group(2)))
    drawn = set()
    problems = []
    for a, b in picture:
        if a not in nodes or b not in nodes:
            problems.append(f"docs/architecture.md: the picture's arrow {a} --> {b} uses a node it does not declare")
            continue
        drawn.add((nodes[a], nodes[b]))
    return allowed, drawn, set(nodes.values()), problems


def closure(arrows, modules):
    reach = {m: set() for m in modules}
    for a, b in arrows:
        reach.setdefault(a, set()).add(b)
    changed = True
    while changed:
        changed = False
        for m in list(reach):
            more = set().union(*(reach.get(n, set()) for n in reach[m])) - reach[m]
            if more:
                reach[m] |= more
                changed = True
    return reach


def module_of(path, modules):
    """The module a file belongs to: the longest module path that is a folder above it."""
    folder = os.path.dirname(path)
    while folder:
        if folder in modules:
            return folder
        folder = os.path.dirname(folder)
    return None


def main(source_dir):
    os.chdir(source_dir)
    allowed, drawn, drawn_nodes, problems = read_architecture("docs/architecture.md")
    if not allowed:
        print("docs/architecture.md: no table of modules found")
        return 1
    modules = set(allowed)
    for m, deps in sorted(allowed.items()):
        for d in sorted(deps - modules):
            problems.append(f"docs/architecture.md: module '{m}' may include '{d}', which is not a module of the table")

    # Cycles: a module that reaches itself.
    table_arrows = {(a, b) for a, deps in allowed.items() for b in deps}
    reach = closure(table_arrows, modules)
    for m in sorted(modules):
        if m in reach[m]:
            problems.append(
                f"docs/architecture.md: module '{m}' reaches itself through the arrows of the table (a cycle)"
            )

    # The floors: the ground floor stands on nothing; the formats on the ground floor alone.
    for m, deps in sorted(allowed.items()):
        floor = m.split("/")[0]
        if floor in FLOORS:
            for d in sorted(deps):
                if d.split("/")[0] not in FLOORS[floor]:
                    problems.append(
                        f"docs/architecture.md: module '{m}' may include '{d}', above its floor ({floor}/ may include "
                        f"only {', '.join(f'{x}/' for x in FLOORS[floor]) or 'nothing'})"
                    )

    # The picture: its arrows are the table's, and it implies all of them.
    for a, b in sorted(drawn - table_arrows):
        problems.append(f"docs/architecture.md: the picture draws {a} --> {b}, which the table does not allow")
    drawn_reach = closure(drawn, modules)
    for m in sorted(modules):
        for b in sorted(reach[m] - drawn_reach.get(m, set())):
            problems.append(f"docs/architecture.md: the picture does not show that '{m}' may include '{b}'")
    for m in sorted(modules - drawn_nodes):
        problems.append(f"docs/architecture.md: the picture has no node for module '{m}'")

    # Every include of every governed file.
    checked = 0
    for top in GOVERNED:
        for root, _, files in os.walk(top):
            code = [f for f in files if f.endswith(CODE)]
            if code and root not in modules:
                problems.append(f"{root}/: holds code but is not a module of docs/architecture.md's table")
            for name in sorted(code):
                path = os.path.join(root, name)
                mine = module_of(path, modules)
                if mine is None:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                for lineno, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    checked += 1
                    header = m.group(1)
                    if header == "stoker/torch.h":
                        if mine != "torch_adapter":
                            problems.append(f"{path}:{lineno}: includes stoker/torch.h, which only torch_adapter may")
                        continue
                    if header.startswith("stoker/"):
                        continue  # the public API
                    theirs = module_of(header, modules)
                    if theirs is None:
                        problems.append(f'{path}:{lineno}: includes "{header}", which is in no module')
                    elif theirs != mine and theirs not in allowed[mine]:
                        may = ", ".join(sorted(allowed[mine])) or "no module"
                        problems.append(
                            f"{path}:{lineno}: includes \"{header}\" of module '{theirs}', which module '{mine}' "
                            f"may not include (docs/architecture.md allows: {may})"
                        )
    # The size of every source file.
    for top in SIZED:
        for root, _, files in os.walk(top):
            for name in sorted(f for f in files if f.endswith(SOURCE)):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    count = sum(1 for _ in f)
                if count > MAX_LINES:
                    problems.append(f"{path}: {count} lines, more than {MAX_LINES}: split it by concept")

    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) with the module arrows")
        return 1
    print(f"{checked} includes in {len(modules)} modules follow docs/architecture.md")
    return 0


def self_test(source_dir):
    """A shm header that includes the producers module (a peer-to-upper arrow) must be named; so must
    a table that lets formats/ include loader/."""
    import shutil
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        shutil.copy(os.path.join(source_dir, "docs", "architecture.md"), os.path.join(tmp, "docs"))
        with open(os.path.join(source_dir, "docs", "architecture.md"), encoding="utf-8") as f:
            modules = [m.group(1) for m in map(ROW.match, f) if m]
        for m in modules:
            os.makedirs(os.path.join(tmp, m), exist_ok=True)
            with open(os.path.join(tmp, m, "a.h"), "w") as f:
                f.write('#pragma once\n#include <vector>\n#include "stoker/batch.h"\n')
        with open(os.path.join(tmp, "loader", "shm", "a.h"), "a") as f:
            f.write('#include "base/a.h"\n#include "loader/producers/a.h"\n')
        run = subprocess.run([sys.executable, __file__, tmp], capture_output=True, text=True)
        want = (
            "loader/shm/a.h:5: includes \"loader/producers/a.h\" of module 'loader/producers', "
            "which module 'loader/shm' may not include"
        )
        if run.returncode != 1 or want not in run.stdout or "a.h:4" in run.stdout:
            print(
                f"self-test: expected exit 1 naming only line 5 of loader/shm/a.h, got {run.returncode}:\n{run.stdout}"
            )
            return 1
        print("self-test: a forbidden include is reported as:\n  " + run.stdout.splitlines()[0])

        # A table that lets the ground floor stand on the loader breaks the house, whatever it says.
        table = os.path.join(tmp, "docs", "architecture.md")
        with open(table, encoding="utf-8") as f:
            text = f.read()
        with open(table, "w", encoding="utf-8") as f:
            f.write(re.sub(r"^(\| `formats/core` \|[^|]*\| )`base` \|", r"\1`base`, `loader/shm` |", text, flags=re.M))
        run = subprocess.run([sys.executable, __file__, tmp], capture_output=True, text=True)
        want = (
            "module 'formats/core' may include 'loader/shm', above its floor "
            "(formats/ may include only base/, formats/)"
        )
        if run.returncode != 1 or want not in run.stdout:
            print(f"self-test: expected exit 1 naming formats/core's arrow to loader/shm, got {run.returncode}:")
            print(run.stdout)
            return 1
        print("self-test: an arrow above its floor is reported as:\n  " + want)
        return 0


def picture(source_dir):
    """The Mermaid picture of the table: every module a node, every arrow not implied by another."""
    allowed, _, _, _ = read_architecture(os.path.join(source_dir, "docs", "architecture.md"))
    reach = closure({(a, b) for a, deps in allowed.items() for b in deps}, set(allowed))
    node = {m: m.replace("/", "_") for m in allowed}
    lines = ["```mermaid", "graph TD"] + [f'  {node[m]}["{m}"]' for m in allowed]
    for a, deps in allowed.items():
        for b in sorted(deps):
            if not any(b in reach[c] for c in deps if c != b):
                lines.append(f"  {node[a]} --> {node[b]}")
    print("\n".join(lines + ["```"]))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--picture":
        sys.exit(picture(sys.argv[2] if len(sys.argv) > 2 else "."))
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        sys.exit(self_test(sys.argv[2] if len(sys.argv) > 2 else "."))
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
