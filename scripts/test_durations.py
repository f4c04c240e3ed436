"""Per-file test seconds from a JUnit XML report: the order in which pytest-xdist hands files out.

    python -m pytest -n 2 --dist loadfile --junitxml=/tmp/junit.xml -o junit_family=xunit1
    python scripts/test_durations.py /tmp/junit.xml > tests/file_seconds.json

``make test-durations`` runs both. Each file's figure is the sum of its tests' times as the report
gives them (setup, call and teardown: a file's shared fixtures count once, with its first test).
tests/conftest.py hands the files out heaviest first (longest processing time first), so that a
file of a few long tests does not start last and run alone at the end.
"""

from __future__ import annotations

import collections
import json
import sys
import xml.etree.ElementTree as ET


def file_seconds(report: str) -> dict:
    totals: collections.Counter = collections.Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        path = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        totals[path] += float(case.get("time") or 0.0)
    return {path: round(seconds, 1) for path, seconds in totals.most_common()}


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python scripts/test_durations.py JUNIT_XML")
    print(json.dumps(file_seconds(sys.argv[1]), indent=1))


if __name__ == "__main__":
    main()
