"""The exercise cards' "Graded." tables: generated from the specs and the grading configuration."""

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
        line = cards.summary(ex, cfg)
        assert "\n" not in line and all(cards._NAMES.get(c, c).lower() in line for c in ex.criteria), line


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
