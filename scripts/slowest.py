"""The slowest tests of the tiers `make test` ran, from pytest's JUnit XML files.

    python scripts/slowest.py 15 test-artifacts/junit-*.xml

Prints the N slowest tests (set-up, call and tear-down together, as JUnit reports them) with
their tier, and each tier's test count and wall time."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main(argv: list[str]) -> int:
    n, files = int(argv[0]), [Path(a) for a in argv[1:] if Path(a).exists()]
    rows: list[tuple[float, str, str]] = []
    for f in files:
        tier = f.stem.removeprefix("junit-")
        root = ET.parse(f).getroot()
        for suite in root.iter("testsuite"):
            print(f"{tier:>12}: {suite.get('tests')} tests in {float(suite.get('time', 0)):.0f} s")
            for case in suite.iter("testcase"):
                name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
                rows.append((float(case.get("time", 0)), tier, name))
    print(f"slowest {n}:")
    for seconds, tier, name in sorted(rows, reverse=True)[:n]:
        print(f"{seconds:8.1f} s  {tier:<11} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
