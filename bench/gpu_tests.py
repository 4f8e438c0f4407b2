"""The gpu-marked tests' run as data: passed, failed and skipped per test file (with each failure's first line
and each skip's reason), from pytest's JUnit XML, under the device, versions and date it ran on.

    python -m pytest -m gpu --junitxml=gpu-tests.xml tests      (on the GPU machine; bench/fair_grades.sh does it)
    python -m bench.gpu_tests gpu-tests.xml [--out DIR]         (saves gpu-tests-<gpu>.json, prints a table)

A GPU test that cannot pass on the GPU is fixed, or its reason written in docs/testing.md; this file is what
says which ran where.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from autograder.measure import device
from bench.common import RESULTS, record, save, slug

OUTCOMES = ("passed", "failed", "skipped")


def outcome(case: ET.Element) -> tuple[str, str]:
    """(passed | failed | skipped, the first line of why) of one <testcase>."""
    for tag, name in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
        found = case.find(tag)
        if found is not None:
            text = found.get("message") or (found.text or "")
            return name, text.strip().splitlines()[0][:200] if text.strip() else ""
    return "passed", ""


def module_file(classname: str) -> str:
    """JUnit's classname of a test as its file: "tests.test_gpu.TestSandbox" -> "tests/test_gpu.py"."""
    parts = classname.split(".")
    modules = [i for i, part in enumerate(parts) if part.startswith("test_") or part == "conftest"]
    return "/".join(parts[: modules[-1] + 1]) + ".py" if modules else classname or "?"


def per_file(xml_text: str) -> dict:
    """{test file: {"passed": n, "failed": n, "skipped": n, "failures": [...], "skips": [...]}}."""
    root = ET.fromstring(xml_text)
    files: dict = defaultdict(lambda: {**{o: 0 for o in OUTCOMES}, "failures": [], "skips": []})
    for case in root.iter("testcase"):
        # a module that failed to collect is a case with no classname, named by its dotted path
        name = case.get("file") or module_file(case.get("classname") or case.get("name") or "")
        status, why = outcome(case)
        row = files[name]
        row[status] += 1
        if status == "failed":
            row["failures"].append(f"{case.get('name')}: {why}")
        elif status == "skipped" and why and why not in row["skips"]:
            row["skips"].append(why)
    if not files:
        raise SystemExit("no <testcase> in the JUnit file: did pytest collect any gpu test?")
    return dict(sorted(files.items()))


def table(result: dict) -> str:
    lines = [f"gpu tests on {result['device']['name']} ({result['date']}, torch {result['torch']}, "
             f"triton {result['triton']})", "", "| file | passed | failed | skipped |", "|---|---|---|---|"]
    for name, row in result["files"].items():
        lines.append(f"| {name} | {row['passed']} | {row['failed']} | {row['skipped']} |")
    totals = {o: sum(r[o] for r in result["files"].values()) for o in OUTCOMES}
    lines.append(f"| all | {totals['passed']} | {totals['failed']} | {totals['skipped']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", type=Path, help="pytest's --junitxml file")
    parser.add_argument("--out", type=Path, default=RESULTS / "gpu-tests")
    args = parser.parse_args(argv)
    if not args.junit.is_file():
        parser.error(f"no such file: {args.junit}")
    result = {**record(device.profile()), "files": per_file(args.junit.read_text())}
    path = save(result, args.out / f"gpu-tests-{slug(result['device']['name'])}.json")
    print(table(result))
    print(f"saved {path}")
    return 0 if not any(r["failed"] for r in result["files"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
