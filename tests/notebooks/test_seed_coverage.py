"""docs/seed-coverage.md: every item of the course's source documents points to a section heading that is
in the named notebook's text source, an exercise id that is in the registry, or a topic that the notebook's
"Not covered here" paragraph names in bold; every status agrees with its pointers, and the counts the page
states add up."""

import re
from pathlib import Path

import pytest

from autograder.specs import all_exercises

PAGE = "docs/seed-coverage.md"
STATUSES = ("taught", "in part", "left out")

SECTION = re.compile(r'(\d\d) § "([^"]+)"')
EXERCISE = re.compile(r"`(\d\d\.[a-z0-9_]+)`")
NOT_COVERED = re.compile(r'not covered: (\d\d) "([^"]+)"')
SUMMARY = re.compile(r"\*\*(\d+) items: (\d+) taught, (\d+) in part, (\d+) left out\.\*\*")
HEADING = re.compile(r"^# #{1,6} (.+?)\s*$")
NOT_COVERED_OPENING = "**Not covered here.**"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table after `heading`, split into cells."""
    lines = text.splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append(_cells(line))
        elif rows:
            break
    return rows[2:]  # header and separator


def _source(root: Path, number: str) -> str:
    found = sorted(root.glob(f"solutions/{number}_*/{number}_*.py"))
    if len(found) != 1:
        raise LookupError(f"no single notebook numbered {number}: {found}")
    return found[0].read_text()


def _headings(source: str) -> set[str]:
    return {m.group(1) for line in source.splitlines() if (m := HEADING.match(line))}


def _not_covered(source: str) -> str:
    """The text of the notebook's "Not covered here" paragraph and its list, markdown comment marks removed,
    lines joined; empty if the notebook has none."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# " + NOT_COVERED_OPENING):
            kept = []
            for follow in lines[i:]:
                if not follow.startswith("#") or HEADING.match(follow) or follow.startswith("# %%"):
                    break
                kept.append(follow.removeprefix("#").strip())
            return re.sub(r"\s+", " ", " ".join(kept))
    return ""


def problems(text: str, root: Path, exercise_ids: set[str]) -> list[str]:
    """Everything wrong with the coverage page `text`: one line each."""
    found = []
    titles = [row[0] for row in _table(text, "## The sources")]
    rows = _table(text, "## The items")
    if not rows:
        return ["the page has no table of items"]
    sources: dict[str, str] = {}
    counts = dict.fromkeys(STATUSES, 0)
    for expected, row in enumerate(rows, 1):
        if len(row) != 5:
            found.append(f"row {expected}: {len(row)} cells, not 5: {row}")
            continue
        number, item, source, where, status = row
        name = f"item {number} ({item[:40]})"
        if number != str(expected):
            found.append(f"{name}: numbered {number}, expected {expected}")
        for part in source.split(";"):
            if not any(part.strip().startswith(t) for t in titles):
                found.append(f"{name}: source {part.strip()!r} is none of the listed documents {titles}")
        if status not in STATUSES:
            found.append(f"{name}: status {status!r} is none of {STATUSES}")
            continue
        counts[status] += 1
        sections, exercises = SECTION.findall(where), EXERCISE.findall(where)
        left = NOT_COVERED.findall(where)
        if where.count("§") != len(sections):
            found.append(f"{name}: a section pointer is not written as NN § \"heading\": {where!r}")
        if where.count("not covered") != len(left):
            found.append(f"{name}: a left-out pointer is not written as not covered: NN \"topic\"")
        for nb, heading in sections:
            src = sources.setdefault(nb, _source(root, nb))
            if heading not in _headings(src):
                found.append(f"{name}: notebook {nb} has no heading {heading!r}")
        for ex in exercises:
            if ex not in exercise_ids:
                found.append(f"{name}: {ex} is not an exercise of the registry")
        for nb, topic in left:
            src = sources.setdefault(nb, _source(root, nb))
            paragraph = _not_covered(src)
            if not paragraph:
                found.append(f"{name}: notebook {nb} has no {NOT_COVERED_OPENING!r} paragraph")
            elif "**" + topic not in paragraph:
                found.append(f"{name}: notebook {nb}'s not-covered paragraph names no **{topic}**")
        taught = sections or exercises
        if status == "taught" and not taught:
            found.append(f"{name}: taught, but points to no section or exercise")
        if status == "in part" and not (taught and left):
            found.append(f"{name}: in part needs both a section or exercise and a not-covered topic")
        if status == "left out" and (taught or not left or "left out on purpose" not in where):
            found.append(f"{name}: left out needs 'left out on purpose', a not-covered topic, no section")
    summary = SUMMARY.search(text)
    if summary is None:
        found.append("the page states no '**N items: T taught, P in part, L left out.**' line")
    else:
        stated = [int(g) for g in summary.groups()]
        actual = [len(rows)] + [counts[s] for s in STATUSES]
        if stated != actual:
            found.append(f"the page states {stated} (items, taught, in part, left out); the table: {actual}")
    return found


@pytest.fixture(scope="module")
def exercise_ids():
    return {ex.id for ex in all_exercises()}


def test_every_item_points_to_something_real(root, exercise_ids):
    assert problems((root / PAGE).read_text(), root, exercise_ids) == []


def test_the_page_reads_every_source_document(root):
    text = (root / PAGE).read_text()
    titles = [row[0] for row in _table(text, "## The sources")]
    assert len(titles) == 5
    used = " ".join(row[2] for row in _table(text, "## The items"))
    assert [t for t in titles if t not in used] == []


def test_the_page_is_in_the_site_nav(root):
    assert "seed-coverage.md" in (root / "mkdocs.yml").read_text()


@pytest.mark.parametrize(
    "old, new, complaint",
    [
        ('05 § "3. Softmax for rows of any length"', '05 § "3. Softmax for no rows"', "has no heading"),
        ("`05.softmax`", "`05.softmax_typo`", "is not an exercise"),
        ('not covered: 02 "BatchNorm"', 'not covered: 02 "GroupNorm"', "names no **GroupNorm**"),
        ('not covered: 05 "Paged attention"', 'not covered: 03 "Paged attention"', "has no '**Not covered"),
        ("37 taught", "36 taught", "the page states"),
        ("| Blog | 06 §", "| Blag | 06 §", "none of the listed documents"),
    ],
)
def test_a_broken_pointer_is_reported(root, exercise_ids, old, new, complaint):
    text = (root / PAGE).read_text()
    assert old in text, f"the page no longer holds {old!r}: update this test's cases"
    head, items, table = text.partition("## The items")
    broken = head + items + table.replace(old, new, 1) if old in table else text.replace(old, new, 1)
    found = problems(broken, root, exercise_ids)
    assert any(complaint in line for line in found), found


def test_a_left_out_row_that_points_to_a_section_is_reported(root, exercise_ids):
    text = (root / PAGE).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 36 |"))
    pointer = '04 § "2. Why the epilogue is nearly free"'
    broken = row.replace("left out on purpose", f"{pointer} · left out on purpose")
    found = problems(text.replace(row, broken), root, exercise_ids)
    assert any("left out needs" in line for line in found), found
