"""Whether each diagram sits where the course teaches what it draws.

A notebook's sections are its level-1 and level-2 headings (`# ...`, `## ...`) and the markdown cells under each
until the next such heading. A diagram's registry entry (autograder.teach.diagrams) names its notebook, the
section(s) that show it (words of their headings) and its subject as a few key words. A placement agrees when the
figure is shown in its own notebook, under a heading it names, and every key word is written in that section's
prose, in the alt text and in the drawing itself; `disagreements` lists every way one does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FIGURE_LINK = re.compile(r"!\[([^\]]*)\]\(figures/([\w.-]+\.svg)\)")
HEADING = re.compile(r"^#{1,2} +(.+)$", re.M)


@dataclass
class Section:
    heading: str
    text: str = ""  # the heading and the prose of its markdown cells, the figure links taken out
    figures: list[str] = field(default_factory=list)  # file names, in order


def normalise(text: str) -> str:
    """Lower case, markdown's `*` and backticks dropped, runs of blanks made one space: what a reader reads."""
    return " ".join(re.sub(r"[`*]", "", text).lower().split())


def sections(markdown_cells: list[str]) -> list[Section]:
    """The sections of a notebook, given the sources of its markdown cells in order."""
    found = [Section(heading="(before the first heading)")]
    for source in markdown_cells:
        pos = 0
        for match in HEADING.finditer(source):
            found[-1].text += source[pos:match.start()]
            found.append(Section(heading=match.group(1).strip()))
            pos = match.start()
        found[-1].text += "\n" + source[pos:]
    for sec in found:
        sec.figures = [name for _alt, name in FIGURE_LINK.findall(sec.text)]
        sec.text = normalise(FIGURE_LINK.sub(" ", sec.text))
    return found


def missing_words(keywords, text: str) -> list[str]:
    text = normalise(text)
    return [k for k in keywords if normalise(k) not in text]


def disagreements(name: str, entry, notebook: str, section: Section, drawn_text: str) -> list[str]:
    """Every way figure `name`, registered as `entry`, disagrees with being shown in `section` of `notebook`.
    `drawn_text` is the text the drawing writes."""
    where = f"{name} in {notebook}, section {section.heading!r}"
    out = []
    if entry.notebook != notebook:
        out.append(f"{where}: it belongs to notebook {entry.notebook}")
    if not any(normalise(s) in normalise(section.heading) for s in entry.sections):
        out.append(f"{where}: it belongs under a heading with {' or '.join(map(repr, entry.sections))}")
    for label, text in [("the section's prose", section.text), ("its alt text", entry.alt),
                        ("the drawing", drawn_text)]:
        if missing := missing_words(entry.keywords, text):
            out.append(f"{where}: {', '.join(map(repr, missing))} missing from {label}")
    return out


def notebook_disagreements(notebook: str, markdown_cells: list[str], registry: dict, drawn: dict) -> list[str]:
    """The disagreements of every figure a notebook shows, plus its registered figures that it never shows.
    registry: name -> entry; drawn: name -> the text its drawing writes."""
    out, shown = [], set()
    for sec in sections(markdown_cells):
        for name in sec.figures:
            shown.add(name)
            if name not in registry:
                out.append(f"{name} in {notebook}: not in the registry of autograder.teach.diagrams")
                continue
            out += disagreements(name, registry[name], notebook, sec, drawn[name])
    for name, entry in registry.items():
        if entry.notebook == notebook and name not in shown:
            out.append(f"{name}: registered for {notebook}, which never shows it")
    return out
