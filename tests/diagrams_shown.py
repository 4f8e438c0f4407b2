"""Whether a page rendered from a notebook shows its diagrams. The build embeds each `![](figures/NAME.svg)` of a
notebook's text source as a data URI, with the alt text of its registry entry (autograder.publish.build
.embed_figures), so that nbgrader's feedback pages and the documentation site, which are written without the
notebook's folder, show the picture itself."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import jupytext

from autograder.publish import build


def expected(root: Path, name: str) -> dict[str, str]:
    """{alt text: data URI of the SVG} of each diagram notebook `name` shows, read from its text source."""
    src = root / "solutions" / name / f"{name}.py"
    cells = jupytext.read(src, fmt="py:percent").cells
    return {alt: build.svg_data_uri(src.parent / "figures" / file)
            for cell in cells if cell.cell_type == "markdown" for alt, file in build.figure_links(cell.source)}


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))


def not_shown(root: Path, name: str, html: str) -> list[str]:
    """The alt texts of notebook `name`'s diagrams that the page does not show inline: no <img> with that alt
    text whose source is the diagram's own data URI."""
    parser = _Images()
    parser.feed(html)
    shown = {" ".join((img.get("alt") or "").split()): img.get("src") for img in parser.images}
    return [alt for alt, uri in expected(root, name).items() if shown.get(alt) != uri]
