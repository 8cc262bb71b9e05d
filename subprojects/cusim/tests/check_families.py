#!/usr/bin/env python3
"""README.md's per-family fidelity tables are what src/gen-exports families
says of the built libraries: regenerate them with that command when a
family changes."""
import subprocess
import sys

gen, libcudart, libcuda, libcudart12, doc = sys.argv[1:6]
want = subprocess.run([sys.executable, gen, "families", libcudart, libcuda, libcudart12], check=True,
                      capture_output=True, text=True).stdout.strip()
text = open(doc).read()
if want not in text:
    print(f"check_families: {doc}'s family tables differ from the built libraries; replace them with:")
    print(want)
    sys.exit(1)
print("check_families: the tables match")
