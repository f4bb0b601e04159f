"""The slowest tests of the tiers `make test` ran, from pytest's JUnit XML files.

    python scripts/slowest.py 15 test-artifacts/junit-*.xml

Prints each run's test count and wall time (a run is one JUnit file: `parallel` holds the unit
tier and the parallel-safe tests of the others, `serial` the rest of the integration and e2e
tiers), each tier's test count and its tests' time summed, then the N slowest
tests (set-up, call and tear-down together, as JUnit reports them) with their tier (the `tier`
property tests/conftest.py records; the file's name for older files)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def main(argv: list[str]) -> int:
    n, files = int(argv[0]), [Path(a) for a in argv[1:] if Path(a).exists()]
    rows: list[tuple[float, str, str]] = []
    tiers: Counter[str] = Counter()
    seconds_of: Counter[str] = Counter()
    for f in files:
        run = f.stem.removeprefix("junit-")
        root = ET.parse(f).getroot()
        for suite in root.iter("testsuite"):
            print(f"{run:>12}: {suite.get('tests')} tests in {float(suite.get('time', 0)):.0f} s")
            for case in suite.iter("testcase"):
                # pytest-xdist's --dist loadgroup appends "@group" to a grouped test's name
                test = str(case.get("name"))
                if test.rfind("@") > test.rfind("]"):
                    test = test[:test.rfind("@")]
                name = f"{case.get('classname', '').replace('.', '/')}.py::{test}"
                prop = case.find("properties/property[@name='tier']")
                tier = prop.get("value", run) if prop is not None else run
                tiers[tier] += 1
                seconds_of[tier] += float(case.get("time", 0))
                rows.append((float(case.get("time", 0)), tier, name))
    print("tiers: " + ", ".join(f"{t} {c} ({seconds_of[t]:.0f} s of tests)"
                                for t, c in sorted(tiers.items())))
    print(f"slowest {n}:")
    for seconds, tier, name in sorted(rows, reverse=True)[:n]:
        print(f"{seconds:8.1f} s  {tier:<11} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
