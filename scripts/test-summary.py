#!/usr/bin/env python3
"""Prints "N passed, N failed" from meson's testlog.json (one test per line)."""
import json
import sys

passed = failed = 0
try:
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            result = json.loads(line).get("result", "")
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result != "SKIP":
                failed += 1
except OSError:
    failed += 1
print(f"{passed} passed, {failed} failed")
