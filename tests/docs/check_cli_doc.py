#!/usr/bin/env python3
"""layering.cli_doc: docs/cli.md must be exactly what the built CLI generates from its option
tables and the config key table (`lockstep docs cli`). Usage: check_cli_doc.py LOCKSTEP SOURCE_DIR.
On a difference it prints the first differing lines and how to regenerate; exit 1."""
import difflib
import subprocess
import sys

lockstep, root = sys.argv[1], sys.argv[2]
generated = subprocess.run([lockstep, "docs", "cli"], check=True, capture_output=True,
                           text=True).stdout
path = f"{root}/docs/cli.md"
try:
    committed = open(path, encoding="utf-8").read()
except FileNotFoundError:
    committed = ""
if generated == committed:
    print(f"layering.cli_doc: {path} is current ({len(generated.splitlines())} lines)")
    sys.exit(0)
diff = list(difflib.unified_diff(committed.splitlines(), generated.splitlines(),
                                 "docs/cli.md (committed)", "lockstep docs cli", lineterm="", n=1))
print("\n".join(diff[:40]))
print(f"layering.cli_doc: {path} is out of date; regenerate it with: "
      f"{lockstep} docs cli > docs/cli.md")
sys.exit(1)
