"""The documentation: the site builds strictly, every page is reachable, the README is a short landing page whose
links resolve, and no hand-written page quotes a measured speed (those live on the generated benchmarks page)."""

import os
import re
import subprocess
import sys

import diagrams_shown
import pytest
import yaml

# Pages made by a program from committed data, not written by hand. docs/hooks.py stands in a placeholder for
# the benchmarks page where it has not been generated yet, so a link to it is never broken in the site.
GENERATED = {"docs/benchmarks.md"}

README_MAX_LINES = 200

# A measured speed: a number next to a rate's unit, a ratio against another version ("1.55x eager"), a fraction
# of a peak or of a peer ("0.97 of copy"), or a time in milliseconds or microseconds. Sizes, counts and versions
# ("2 cores", "a 1 GiB copy", "triton 3.6") are not speeds.
_NUM = r"\d[\d,]*(?:\.\d+)?"
_UNITS = r"(?:[GT]B/s|[GT]FLOP/s|[GT]FLOPS|k?\s?tokens/s)"
SPEED_FIGURES = {
    "a rate": re.compile(rf"{_NUM}\s*{_UNITS}"),
    "a rate after its unit": re.compile(rf"{_UNITS}\s*(?:of|:|=|,)?\s*{_NUM}"),
    "a ratio against another version": re.compile(
        r"\b\d+\.\d+\s*x\b|\b\d+\s*x\s+`?(?:eager|torch\.compile|cuBLAS|SDPA|Liger|faster|slower|the time)"
    ),
    "a fraction of a peak or of a peer": re.compile(
        r"\b\d*\.\d+(?:\s*(?:to|-|–)\s*\d*\.\d+)?\s+of\s+`?"
        r"(?:copy|peak|the (?:copy|matmul|peak)|SDPA|cuBLAS|torch\.compile|eager|Liger|its speed)"
    ),
    "a time": re.compile(rf"\b{_NUM}\s*(?:ms|us|µs)\b"),
}


def speed_figures(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind, pattern in SPEED_FIGURES.items():
            found += [f"line {number}: {m.group(0)!r} ({kind})" for m in pattern.finditer(line)]
    return found


def _hand_written(root):
    pages = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    return [p for p in pages if p.relative_to(root).as_posix() not in GENERATED]


def _nav_targets(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [t for item in nav for t in _nav_targets(item)]
    if isinstance(nav, dict):
        return [t for value in nav.values() for t in _nav_targets(value)]
    return []


@pytest.fixture
def config(root):
    return yaml.safe_load((root / "mkdocs.yml").read_text())


@pytest.mark.slow
def test_site_builds_strictly(root, tmp_path):
    # --strict: a broken link, a missing image or a page left out of the nav fails the build. The notebooks are
    # rendered as they are, not run (mkdocs-jupyter's execute is off).
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(root / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=root, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (site / "index.html").is_file() and (site / "benchmarks.html").is_file()
    for nb in sorted(root.glob("course/[0-9][0-9]_*/[0-9][0-9]_*.ipynb")):
        page = site / nb.relative_to(root).with_suffix(".html")
        assert page.is_file(), f"{nb.relative_to(root)} has no page in the site"
        assert diagrams_shown.not_shown(root, nb.stem, page.read_text()) == [], f"{nb.stem}: diagrams not shown"
    assert not (site / "hooks.py").exists()
    # Opened from the disk (file://), a link must name a page, not a folder (which shows a directory listing).
    links = re.findall(r'href="([^"#?]*)"', (site / "index.html").read_text())
    local = [link for link in links if link and not re.match(r"[a-z]+:", link)]
    assert "students.html" in local and not [link for link in local if link.endswith("/")], local


def test_every_page_is_in_the_nav(root, config):
    targets = set(_nav_targets(config["nav"]))
    pages = {p.relative_to(root / "docs").as_posix() for p in (root / "docs").glob("*.md")}
    pages |= {g.removeprefix("docs/") for g in GENERATED}
    assert pages <= targets, f"pages missing from mkdocs.yml's nav: {sorted(pages - targets)}"
    notebooks = {p.relative_to(root).as_posix() for p in root.glob("course/[0-9][0-9]_*/[0-9][0-9]_*.ipynb")}
    assert len(notebooks) == 8 and notebooks <= targets, f"notebooks missing from the nav: {notebooks - targets}"


def test_site_goes_to_an_ignored_folder_and_opens_from_the_disk(root, config):
    assert config["docs_dir"] == "docs" and config["site_dir"] == "build/site"
    assert config["use_directory_urls"] is False  # build/site/index.html's links then name pages, not folders
    assert "build/" in (root / ".gitignore").read_text().split()


def test_readme_is_a_short_landing_page(root):
    lines = (root / "README.md").read_text().splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines: move detail into docs/"


def test_readme_links_resolve(root):
    text = (root / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    missing = []
    for link in links:
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        path = link.split("#", 1)[0]
        if path not in GENERATED and not (root / path).exists():
            missing.append(link)
    assert not missing, f"README links to files that do not exist: {missing}"


@pytest.mark.parametrize("page", ["README.md", "docs/*.md"])
def test_hand_written_pages_quote_no_measured_speed(root, page):
    # Measured figures go stale with every kernel change and differ by GPU; they are quoted on docs/benchmarks.md,
    # which is generated from bench/results/ and so cannot disagree with them.
    pages = [p for p in _hand_written(root) if p.match(page)]
    assert pages
    found = {p.relative_to(root).as_posix(): speed_figures(p.read_text()) for p in pages}
    found = {k: v for k, v in found.items() if v}
    assert not found, f"measured speeds in hand-written pages (link docs/benchmarks.md instead): {found}"


@pytest.mark.parametrize("text", ["0.97 of copy", "1.55x eager", "479 TFLOP/s", "3000 GB/s", "GB/s: 4085",
                                  "860 k tokens/s", "17.3 ms", "0.67-0.72 of SDPA's backward", "4x `torch.compile`"])
def test_speed_figures_are_recognised(text):
    assert speed_figures(f"It reached {text} on an H100.")


@pytest.mark.parametrize("text", ["2 cores", "4 warps and 3 stages", "the 25-minute budget", "a 1 GiB copy",
                                  "a 16 GiB cap", "an N × N matrix", "compute capability 8.0", "triton 3.6 to 3.9",
                                  "GB/s from a one-line formula", "about 6e-8 for float32", "20 seconds",
                                  "4·eps·√K", "M = 8192 x 4096"])
def test_prose_is_not_taken_for_a_speed(text):
    assert not speed_figures(f"It uses {text} here.")


# The time a notebook's header gives ("About 4 hours", "About 13-20 h", "about 4 to 6 hours"), and the README's
# time column ("2-4 h"), as (low, high) hours.
_HOURS = re.compile(r"\babout (\d+(?:\.\d+)?)(?:\s*(?:-|–|to)\s*(\d+(?:\.\d+)?))?\s*(?:h\b|hours?\b)", re.I)
_README_ROW = re.compile(r"^\| (\d\d) \|.*\| (\d+(?:\.\d+)?)(?:\s*(?:-|–)\s*(\d+(?:\.\d+)?))? h \| [^|]+ \|$", re.M)
_README_TOTAL = re.compile(r"takes roughly (\d+) to (\d+) hours, without the optional notebook 08")


def _span(low: str, high: str | None) -> tuple[float, float]:
    return float(low), float(high or low)


def header_hours(src) -> tuple[float, float]:
    """The estimate in a notebook source's header: the first line of its opening cells that gives a difficulty."""
    for line in src.read_text().splitlines()[:40]:
        match = _HOURS.search(line)
        if match and "difficulty" in line:
            return _span(match.group(1), match.group(2))
    raise AssertionError(f"{src.name}: no 'About N hours · difficulty' line in its header")


def readme_hours(text: str) -> dict[str, tuple[float, float]]:
    return {m.group(1): _span(m.group(2), m.group(3)) for m in _README_ROW.finditer(text)}


def test_readme_time_table_agrees_with_the_notebook_headers(root):
    from autograder.publish import build

    text = (root / "README.md").read_text()
    table = readme_hours(text)
    headers = {src.stem[:2]: header_hours(src) for src in build.sources(root)}
    assert set(table) == set(headers), f"README rows {sorted(table)}, notebooks {sorted(headers)}"
    differ = {nn: {"README": table[nn], "header": headers[nn]} for nn in headers if table[nn] != headers[nn]}
    assert not differ, f"the README's time column and the notebooks' headers disagree (hours): {differ}"
    total = _README_TOTAL.search(text)
    assert total, "the README no longer says how long the whole course takes"
    low = sum(lo for nn, (lo, _) in headers.items() if nn != "08")
    high = sum(hi for nn, (_, hi) in headers.items() if nn != "08")
    assert _span(*total.groups()) == (low, high), f"the README's total should read {low:g} to {high:g} hours"


@pytest.mark.parametrize("line,hours", [("# *About 4 hours · difficulty ★☆☆ · prerequisites", (4, 4)),
                                        ("# **About 13-20 h · difficulty ★★★ · prerequisites", (13, 20)),
                                        ("# **Optional · Hopper only · about 4 to 6 hours · difficulty ★★★", (4, 6)),
                                        ("# About 2–4 h · difficulty ★☆☆", (2, 4))])
def test_a_header_estimate_is_read_in_each_form(tmp_path, line, hours):
    src = tmp_path / "09_x.py"
    src.write_text(f"# %% [markdown]\n# # Title\n#\n{line}\n")
    assert header_hours(src) == hours
