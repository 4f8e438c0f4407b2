"""MkDocs hook (mkdocs.yml: hooks): pages and pictures that live outside docs/, served without copying them.

- Each release notebook course/NN_name/NN_name.ipynb becomes a page at that same path in the site, read in place
  from the repository; mkdocs-jupyter renders it without running it.
- A page may show a picture kept elsewhere in the repository by linking it relative to docs/, as GitHub shows it
  (`![...](../bench/results/x.png)`): the picture is served at bench/results/x.png and the link
  rewritten to it. Only pictures: a link to any other file outside docs/ still fails the strict build.
- Where docs/benchmarks.md (generated from bench/results/) is missing, a short placeholder page stands in
  for it in this build only. Nothing is written to disk.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PICTURES = (".png", ".svg", ".jpg", ".jpeg", ".gif")
LINK = re.compile(r"(\]\()([^)\s]+)(\))")

PLACEHOLDER = """# Benchmarks

This page is generated from the committed results in `bench/results/`; it has not been generated in
this checkout yet.
"""

_served: set[str] = set()  # repository paths of the pictures served from outside docs/


def release_notebooks() -> list[Path]:
    return sorted(ROOT.glob("course/[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))


def _outside_picture(page_uri: str, link: str) -> str | None:
    """The repository path of a picture outside docs/ that `link`, written in docs/<page_uri>, points to."""
    if re.match(r"[a-z]+:", link) or not link.lower().endswith(PICTURES):
        return None
    target = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_uri), link))
    if target.startswith(("docs/", "../")) or not (ROOT / target).is_file():
        return None
    return target


def _file(path: str, config) -> File:
    return File(path, src_dir=str(ROOT), dest_dir=config.site_dir, use_directory_urls=config.use_directory_urls)


# Before mkdocs-jupyter's own on_files (priority 0), so that it takes the notebooks for pages.
@event_priority(100)
def on_files(files: Files, config) -> Files:
    for nb in release_notebooks():
        files.append(_file(nb.relative_to(ROOT).as_posix(), config))
    _served.clear()
    for page in DOCS.rglob("*.md"):
        uri = page.relative_to(DOCS).as_posix()
        for _, link, _ in LINK.findall(page.read_text(encoding="utf-8")):
            target = _outside_picture(uri, link)
            if target and target not in _served:
                _served.add(target)
                files.append(_file(target, config))
    if files.get_file_from_path("benchmarks.md") is None:
        files.append(File.generated(config, "benchmarks.md", content=PLACEHOLDER))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    uri = page.file.src_uri

    def rewrite(m: re.Match) -> str:
        target = _outside_picture(uri, m.group(2))
        if target not in _served:
            return m.group(0)
        return m.group(1) + posixpath.relpath(target, posixpath.dirname(uri) or ".") + m.group(3)

    return LINK.sub(rewrite, markdown)
