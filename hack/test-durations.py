#!/usr/bin/env python3
"""Where `make test`'s time went, from the JUnit files hack/run-tests.sh leaves beside its logs.

    hack/test-durations.py [LOGS_DIR] [--top N]

Per part: its tests' summed time (setup and teardown included: a session fixture's cost
lands on the first test that uses it), the files that took longest, and the slowest
tests. The summed times are what to balance when moving directories between parts.
Standard library only, so it runs without the venv (e.g. on a CI artifact).
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def report(xml_file: Path, top: int) -> str:
    cases = [
        (float(case.get("time") or 0.0), case.get("classname") or "?", case.get("name") or "?")
        for case in ET.parse(xml_file).getroot().iter("testcase")
    ]
    per_file: defaultdict[str, float] = defaultdict(float)
    for seconds, module, _ in cases:
        per_file[module] += seconds
    longest = sorted(per_file.items(), key=lambda item: item[1], reverse=True)[:top]
    lines = [f"== {xml_file.stem}: {len(cases)} tests, {sum(s for s, _, _ in cases):.0f} s summed"]
    lines += [f"  {seconds:7.1f} s  {module}" for module, seconds in longest]
    lines.append("  slowest tests:")
    lines += [f"  {seconds:7.1f} s  {module}::{name}" for seconds, module, name in sorted(cases, reverse=True)[:top]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="?", type=Path, default=Path(".swerollout/test-logs"))
    parser.add_argument("--top", type=int, default=10, help="files and tests to list per part (default 10)")
    args = parser.parse_args()
    files = sorted(args.logs.glob("*.xml"))
    if not files:
        print(f"no JUnit files in {args.logs}: run `make test` first (hack/run-tests.sh writes them)", file=sys.stderr)
        return 2
    print("\n\n".join(report(f, args.top) for f in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
