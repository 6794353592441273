#!/usr/bin/env python3
"""The include-direction test (docs/design.md section 4).

Reads the library graph from the build files (every `lockstep_module(NAME DIR DEPS...)` call
and the `target_link_libraries` of the libraries defined with `add_library`), maps each source
folder to its library, then reads every `#include "..."` of the project's sources and fails on:
  - an include of a header whose library is neither the includer's own nor one it depends on
    (directly or through others): an include that runs against the direction
    runtime -> parallel / optim / data -> model -> verify -> checkpoint -> launch
    (train -> experiments -> cli);
  - a library that links another one that none of its files includes (a link the code does
    not need hides the real direction);
  - a cycle in the library graph.
Usage: check_includes.py SOURCE_DIR. Prints each problem on one line; exit 1 if any.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
SKIP = {"tests", "bench", "build", "docs", ".git"}


def cmake_files():
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP and not x.startswith("build")]
        if "CMakeLists.txt" in files:
            yield os.path.join(d, "CMakeLists.txt")


def calls(text, name):
    for m in re.finditer(r"\b" + name + r"\s*\(([^)]*)\)", text):
        body = re.sub(r"#[^\n]*", "", m.group(1))
        yield body.split()


lib_of_dir, deps = {}, {}
for path in cmake_files():
    text = open(path, encoding="utf-8").read()
    here = os.path.relpath(os.path.dirname(path), root)
    for args in calls(text, "lockstep_module"):
        if len(args) >= 2 and args[0].startswith("lockstep_"):
            lib_of_dir[args[1]] = args[0]
            deps.setdefault(args[0], set()).update(a for a in args[2:] if a.startswith("lockstep_"))
    for args in calls(text, "add_library"):
        if args and args[0].startswith("lockstep_") and "INTERFACE" not in args[1:2] \
                and "OBJECT" not in args[1:2] and here != ".":
            lib_of_dir[here] = args[0]
            deps.setdefault(args[0], set())
    for args in calls(text, "target_link_libraries"):
        if args and args[0] in deps:
            deps[args[0]].update(a for a in args[1:] if a.startswith("lockstep_")
                                 and a not in (args[0], "lockstep_all", "lockstep_openblas"))

problems = []
if not lib_of_dir:
    sys.exit("check_includes: no lockstep_module() calls found under " + root)


def closure(lib, seen=None):
    seen = set() if seen is None else seen
    for d in deps.get(lib, ()):
        if d not in seen:
            seen.add(d)
            closure(d, seen)
    return seen


for lib in deps:
    if lib in closure(lib):
        problems.append(f"cycle: {lib} depends on itself through {sorted(deps[lib])}")


def library_of(relpath):
    best = None
    for d in lib_of_dir:
        if relpath.startswith(d + "/") and (best is None or len(d) > len(best)):
            best = d
    return lib_of_dir[best] if best else None


used = {lib: set() for lib in deps}
checked = 0
for d, dirs, files in os.walk(root):
    dirs[:] = [x for x in dirs if x not in SKIP and not x.startswith("build")]
    for f in files:
        if not f.endswith((".cpp", ".hpp", ".h", ".cu", ".cuh")):
            continue
        rel = os.path.relpath(os.path.join(d, f), root)
        lib = library_of(rel)
        if lib is None:
            continue
        checked += 1
        for n, line in enumerate(open(os.path.join(d, f), encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            target = library_of(m.group(1))
            if target is None or target == lib:
                continue
            used[lib].add(target)
            if target not in closure(lib):
                problems.append(f"{rel}:{n}: includes {m.group(1)} ({target}), which {lib} "
                                f"does not depend on: the include runs against the direction")

for lib, ds in deps.items():
    for dep in sorted(ds - used.get(lib, set())):
        if dep in deps:  # a project library that no file of lib includes
            problems.append(f"{lib} links {dep}, which none of its files includes: drop the link")

for p in problems:
    print(p)
print(f"check_includes: {checked} files in {len(deps)} libraries, {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
