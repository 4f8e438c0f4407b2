"""The exercise cards' "Graded." tables: generated from the specs and the grading configuration."""

import re
from pathlib import Path

import pytest

from autograder import config
from autograder import specs as registry
from autograder.publish import build, cards


@pytest.fixture
def cfg():
    return config.load(config.DEFAULT_PATH)


def _row(table: str, criterion: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"| {criterion} |"))


def test_a_kernel_exercise_lists_every_criterion_with_its_numbers(cfg):
    ex = registry.get("02.rmsnorm")
    table = cards.criteria_table(ex, cfg)
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:6]] == [
        "Correctness", "Precision", "Performance", "Fusion"]
    assert "float32 atol 1e-5, rtol 1e-5" in _row(table, "Correctness")
    assert "1.5x" in _row(table, "Precision") and "H = 256, 1024, 4096, 16384" in _row(table, "Precision")
    perf = _row(table, "Performance")
    assert f"{cfg.bar(ex, 'min_fraction_of_peak', 0.5):g} of this GPU's measured copy bandwidth" in perf
    assert "more than 1.1x the speed of unfused eager PyTorch" in perf and "32768x4096" in perf
    assert "At most 1 kernel launch" in _row(table, "Fusion")
    assert "|ref|" not in table.replace("\\|", "")  # every pipe inside a cell is escaped


def test_a_numeric_exercise_gives_its_tolerance(cfg):
    table = cards.graded_table(registry.get("01.cost_model"), cfg)
    assert "relative tolerance of 1e-6" in _row(table, "Correctness")
    assert len([line for line in table.splitlines() if line.startswith("| ")]) == 2  # the header and one row


def test_a_training_exercise_gives_its_own_bars(cfg):
    ex = registry.get("07.decoder")
    table = cards.graded_table(ex, cfg)
    assert f"{ex.precision_factor:g}x eager PyTorch's relative error" in _row(table, "Correctness")
    assert f"{ex.training_gpu.steps} AdamW steps" in _row(table, "Training run")
    assert f"{cfg.bar(ex, 'min_fraction_of_compiled', 0.4):g} of torch.compile's" in _row(table, "Performance")
    assert f"at most {ex.max_memory_fraction:g} of eager PyTorch's" in _row(table, "Memory")


def test_every_exercise_has_a_card(cfg):
    for ex in registry.all_exercises():
        table = cards.criteria_table(ex, cfg)
        assert table.count("\n| ") == len(ex.criteria), ex.id  # the rows under the header
        names = [row.split("|")[1].strip().lower() for row in table.splitlines()[2:2 + len(ex.criteria)]]
        line = cards.summary(ex, cfg)
        assert "\n" not in line and all(name in line for name in names), (line, names)


def test_the_card_gives_a_one_line_summary_and_folds_the_table(cfg):
    ex = registry.get("02.rmsnorm")
    frac = cfg.bar(ex, "min_fraction_of_peak", 0.5)
    text = cards.graded_table(ex, cfg, points=10)
    line, rest = text.split("\n", 1)
    assert line == ("Graded on correctness, precision (<= 1.5x rounding error), performance "
                    f"(>= {frac:g} of copy bandwidth, > 1.1x eager) and fusion (1 launch); 10 points.")
    # Blank lines around the table inside <details>: without them markdown renders no table.
    assert rest.startswith("\n<details><summary>How it is graded</summary>\n\n| Criterion | Passes when |\n")
    assert rest.endswith("grades it; bars from the exercise's spec and grading.toml.*\n\n</details>")
    optional = cards.summary(registry.get("08.flash_attention_ws"), cfg, points=0)
    assert "0 points; only on a Hopper GPU" in optional and "counts toward no grade" in optional


def test_the_cards_label_and_the_summary_make_one_sentence_with_the_points(cfg):
    text = cards.expand_cards("intro\n\n**Graded.**\n<!-- graded: 01.cost_model -->\n", cfg,
                              points={"01.cost_model": 2})
    assert text.startswith("intro\n\n**Graded** on correctness (relative tolerance 1e-6); 2 points.\n\n<details>")


def test_points_are_summed_over_the_graded_cells_that_check_an_exercise():
    import nbformat

    def cell(source, **md):
        c = nbformat.v4.new_code_cell(source)
        c.metadata["nbgrader"] = md
        return c

    cells = [cell('check("02.rmsnorm", rmsnorm, criteria=["correctness"]).assert_passed("correctness")',
                  grade=True, points=3),
             cell("check('02.rmsnorm', rmsnorm, criteria=['fusion']).assert_passed('fusion')", grade=True, points=2),
             cell('check("02.rmsnorm", rmsnorm)', grade=False),  # a demonstration: no points
             cell('check("02.layernorm", layernorm).assert_passed("correctness")', grade=True, points=1.5)]
    assert cards.points_by_exercise(cells) == {"02.rmsnorm": 5, "02.layernorm": 1.5}


def test_an_override_in_grading_toml_shows_in_the_table(tmp_path, monkeypatch):
    toml = tmp_path / "grading.toml"
    toml.write_text('require_performance = true\n[performance."02.rmsnorm"]\nmin_fraction_of_peak = 0.77\n'
                    "min_speedup_over_eager = 1.3\n")
    monkeypatch.setenv(config.ENV_VAR, str(toml))
    expanded = cards.expand_cards("**Graded.**\n<!-- graded: 02.rmsnorm -->\nafter")
    perf = _row(expanded, "Performance")
    assert "0.77 of this GPU's measured copy bandwidth" in perf and "more than 1.3x" in perf
    assert "without one it fails" in perf
    assert expanded.startswith("**Graded** on correctness,") and expanded.endswith("</details>\nafter")


def test_a_marker_naming_an_unknown_exercise_fails_the_build(tmp_path):
    src = tmp_path / "99_x.py"
    src.write_text('# %% [markdown]\n# ### Exercise\n# <!-- graded: 02.no_such_thing -->\n\n# %%\nx = 1\n')
    with pytest.raises(LookupError, match=r"99_x.py, cell 0: the line '<!-- graded: 02.no_such_thing -->' "
                                          r"names no exercise"):
        build.notebook_from_source(src, tmp_path)


def test_the_build_puts_the_table_in_the_notebook(tmp_path):
    src = tmp_path / "99_x.py"
    src.write_text("# %% [markdown]\n# **Graded.**\n# <!-- graded: 01.cost_model -->\n")
    nb = build.notebook_from_source(src, tmp_path)
    assert "graded:" not in nb.cells[0].source and "relative tolerance of 1e-6" in nb.cells[0].source


def test_every_marker_in_the_sources_names_an_exercise(root):
    known = {ex.id for ex in registry.all_exercises()}
    for src in build.sources(root):
        for match in cards.MARKER.finditer(src.read_text().replace("\n# ", "\n")):
            assert match.group(1) in known, f"{src.name}: {match.group(0)}"


# ---------------------------------------------------------------- the cards' format, in every notebook source
#
# An exercise card opens with `### Exercise NN.id · title (time · stars)`, gives its **Spec.**, then **Hints**:
# Hint 1 (the idea) and Hint 2 (the shape of the code) required, Hint 3 (close to the answer) optional, then
# "Make it fast" (speed tricks only) optional, each a <details> block with blank lines inside; then **Graded.**
# and its marker. Its words (everything outside <details>, plus Hint 1; the generated table is not in the
# source) stay within CARD_WORDS.

CARD_WORDS = 260
# Notebooks whose cards are not in the hint format yet: emptied as each is converted.
NOT_CONVERTED: set[str] = set()

DETAILS = re.compile(r"<details><summary>(.*?)</summary>(.*?)</details>", re.S)
HINT = re.compile(r"Hint (\d) · \S")
# Speed tricks belong in "Make it fast", not in the hints that get a kernel right (unless the card's own text
# outside the hints names one: then speed settings are what the exercise is about, as in autotuning per shape).
SPEED = re.compile(r"\bnum_warps\b|\bnum_stages\b|\bTMA\b|tanh\.approx|\bspill|autotun|warp[- ]speciali", re.I)


def markdown_cells(src: Path) -> list[str]:
    """The markdown cells of a jupytext percent source, their `# ` prefixes taken off."""
    cells, current = [], None
    for line in src.read_text().splitlines():
        if line.startswith("# %%"):
            if current is not None:
                cells.append("\n".join(current).strip())
            current = [] if "[markdown]" in line else None
        elif current is not None:
            current.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    if current is not None:
        cells.append("\n".join(current).strip())
    return cells


def exercise_cards(src: Path) -> list[str]:
    return [c for c in markdown_cells(src) if c.startswith("### Exercise ")]


def card_problems(card: str) -> list[str]:
    """What is wrong with one card's format, in words; empty when it follows the format."""
    problems = []
    if "**Hints**" not in card:
        problems.append("no **Hints** label")
    blocks = DETAILS.findall(card)
    names = [summary for summary, _ in blocks]
    hints = [HINT.match(n) for n in names]
    numbers = [int(h.group(1)) for h in hints if h]
    if numbers not in ([1, 2], [1, 2, 3]):
        problems.append(f"hints numbered {numbers}: Hint 1 and Hint 2 are required, Hint 3 optional")
    others = [n for n, h in zip(names, hints) if not h]
    if others not in ([], ["Make it fast"]) or (others and names[-1] != "Make it fast"):
        problems.append(f"other <details> blocks {others}: only one 'Make it fast', after the hints")
    for summary, body in blocks:
        if not (body.startswith("\n\n") and body.rstrip(" ").endswith("\n\n")):
            problems.append(f"{summary!r}: a blank line after <summary> and before </details> (markdown needs them)")
        trick = SPEED.search(body)
        if HINT.match(summary) and trick and not SPEED.search(DETAILS.sub(" ", card)):
            problems.append(f"{summary!r} speaks of speed ({trick.group(0)!r}): move it to 'Make it fast'")
    if card.count("<details>") != len(blocks):
        problems.append("a <details> block without its <summary> on the same line")
    if not cards.MARKER.search(card) or "**Graded.**" not in card:
        problems.append("no **Graded.** line with its <!-- graded: ID --> marker")
    if "**Spec.**" not in card:
        problems.append("no **Spec.**")
    words = card_words(card)
    if words > CARD_WORDS:
        problems.append(f"{words} words outside the hints (Hint 1 included): at most {CARD_WORDS}")
    return problems


def card_words(card: str) -> int:
    """Words a reader meets before opening anything: the card outside <details>, and Hint 1."""
    hint1 = [body for summary, body in DETAILS.findall(card) if summary.startswith("Hint 1")]
    outside = DETAILS.sub(" ", card)
    text = re.sub(r"<!--.*?-->", " ", outside + " " + " ".join(hint1))
    return len(re.findall(r"[^\s#*|`]+", text.replace("**Hints**", " ")))


@pytest.mark.parametrize("name", [p.stem for p in build.sources()])
def test_every_exercise_card_follows_the_hint_format(root, name):
    if name in NOT_CONVERTED:
        pytest.xfail(f"{name}: its cards are not in the hint format yet")
    src = root / "solutions" / name / f"{name}.py"
    cards_ = exercise_cards(src)
    assert cards_, f"{name} has no exercise card"
    found = {card.splitlines()[0]: card_problems(card) for card in cards_}
    assert not {k: v for k, v in found.items() if v}, {k: v for k, v in found.items() if v}


GOOD_CARD = """### Exercise 09.x · A thing (about 10 min · ★☆☆)

**Spec.** `f(x) -> y`: y = 2x, one launch.

**Hints**

<details><summary>Hint 1 · the idea</summary>

One program per block.

</details>
<details><summary>Hint 2 · the shape of the code</summary>

Load, double, store, all masked.

</details>
<details><summary>Make it fast</summary>

num_warps = 4.

</details>

**Graded.**
<!-- graded: 01.warmup_copy -->"""


def test_a_card_in_the_format_passes_and_each_break_of_it_is_named():
    assert card_problems(GOOD_CARD) == []
    assert "hints numbered [1]" in card_problems(GOOD_CARD.replace("Hint 2 ·", "Second ·"))[0]
    assert any("blank line" in p for p in card_problems(GOOD_CARD.replace("idea</summary>\n\n", "idea</summary>\n")))
    assert any("speaks of speed" in p for p in card_problems(GOOD_CARD.replace("double,", "num_warps=8, double,")))
    assert any("only one 'Make it fast'" in p for p in card_problems(GOOD_CARD.replace("Make it fast", "Speed")))
    assert any("marker" in p for p in card_problems(GOOD_CARD.replace("<!-- graded: 01.warmup_copy -->", "")))
    long = GOOD_CARD.replace("one launch.", "one launch. " + "word " * 250)
    assert any("words outside the hints" in p for p in card_problems(long))
    # The hints beyond the first and the speed tricks are not counted.
    assert card_words(GOOD_CARD.replace("Load, double", "Load, " + "word " * 300 + "double")) == card_words(GOOD_CARD)


def test_hint_markdown_is_found_in_a_text_source(tmp_path):
    src = tmp_path / "09_x.py"
    src.write_text("# %% [markdown]\n" + "\n".join(f"# {line}".rstrip() for line in GOOD_CARD.splitlines())
                   + "\n\n# %%\nx = 1\n")
    assert exercise_cards(src) == [GOOD_CARD]
