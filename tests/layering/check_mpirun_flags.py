#!/usr/bin/env python3
"""The mpirun flags have one spelling: launch/mpirun.flags (docs/design.md section 6).

Fails on code outside that file that spells one of its flags or variables itself instead of
reading the file (bash sources it; CMake reads it into LOCKSTEP_MPIRUN_<NAME> and the
generated lockstep/mpirun_flags.hpp; Python imports launch/mpirun_flags.py): the root flag
and environment, --oversubscribe, --bind-to none and the loopback transport. Scans the
sources, scripts and CMake files (not the documentation, not build folders); comment lines
are prose and are skipped. Usage: check_mpirun_flags.py SOURCE_DIR. Prints each hit on one
line; exit 1 if any.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
# build outputs, and what tests/gpu/bundle.sh and rehearse.sh write (generated from
# launch/mpirun.flags; ignored by git)
SKIP = {"build", ".git", "__pycache__", "gpu-bundle", "gpu-rehearsal", "gpu-out"}
OWN = {os.path.join("launch", "mpirun.flags"), os.path.join("tests", "layering",
                                                            "check_mpirun_flags.py")}
CODE = (".py", ".sh", ".cpp", ".hpp", ".h", ".cu", ".cuh", ".cmake", ".in", "CMakeLists.txt")
SPELLINGS = [
    ("the root flag", re.compile(r"--allow-run-as-root")),
    ("the root environment", re.compile(r"OMPI_ALLOW_RUN_AS_ROOT")),
    ("--oversubscribe", re.compile(r"--oversubscribe")),
    ("--bind-to none", re.compile(r"--bind-to\W+none")),
    ("the loopback transport", re.compile(r"self,vader,tcp|tcp_if_include\W+lo\b")),
]


def is_code(path):
    if path.endswith(CODE):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


hits, checked = [], 0
for d, dirs, files in os.walk(root):
    dirs[:] = sorted(x for x in dirs if x not in SKIP and not x.startswith("build-"))
    for f in sorted(files):
        path = os.path.join(d, f)
        rel = os.path.relpath(path, root)
        if rel in OWN or not is_code(path):
            continue
        checked += 1
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(lines, 1):
            code = line.strip()
            if code.startswith(("#", "//", "*", "/*")) and not code.startswith("#!"):
                continue
            code = re.sub(r"\s//.*$", "", code)  # a C++ comment after the code
            for what, pattern in SPELLINGS:
                if pattern.search(code):
                    hits.append(f"{rel}:{n}: spells {what} itself: use launch/mpirun.flags")

for h in hits:
    print(h)
print(f"check_mpirun_flags: {checked} files, {len(hits)} problem(s)")
sys.exit(1 if hits else 0)
