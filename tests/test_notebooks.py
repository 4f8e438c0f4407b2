"""Notebooks: one source each, solution and release in sync, no drift from kernels/."""

import ast
import inspect
import json
import shutil
import subprocess
import sys
import textwrap

import nbformat
import pytest

from autograder import build, registry

NOTEBOOKS = [p.stem for p in build.sources()]


def _solution_nb(root, name):
    return nbformat.read(root / "solutions" / name / f"{name}.ipynb", as_version=4)


def test_there_are_notebooks():
    assert {"01_hbm_cost_model", "02_vertical_fusion", "03_horizontal_fusion", "04_gemm_epilogue_fusion",
            "05_streaming_reduction_fusion"} <= set(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_solution_notebook_is_built_from_its_text_source(root, name):
    built = build.notebook_from_source(root / "solutions" / name / f"{name}.py")
    committed = _solution_nb(root, name)
    assert nbformat.writes(built) == nbformat.writes(committed), (
        f"solutions/{name}/{name}.ipynb is stale: run `make course`"
    )


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebooks_have_no_outputs(root, name):
    for folder in ("solutions", "course"):
        nb = nbformat.read(root / folder / name / f"{name}.ipynb", as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{folder}/{name}: outputs committed"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_release_is_in_sync_with_solutions(root, tmp_path, name):
    """Regenerate the release in a scratch copy with nbgrader and compare it with the committed course/."""
    work = tmp_path / "course-dir"
    work.mkdir()
    shutil.copy(root / "nbgrader_config.py", work)
    shutil.copytree(root / "solutions" / name, work / "solutions" / name)
    subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force", f"--db=sqlite:///{tmp_path}/gb.db",
         "--log-level=ERROR"],
        cwd=work, check=True, capture_output=True, env=build.tool_env(),
    )
    fresh = sorted(p.relative_to(work / "course") for p in (work / "course").rglob("*") if p.is_file())
    committed = sorted(p.relative_to(root / "course" / name) for p in (root / "course" / name).rglob("*") if p.is_file())
    assert [str(p) for p in fresh] == [f"{name}/{p}" for p in committed], "course/ holds other files than nbgrader makes"
    a = json.loads((work / "course" / name / f"{name}.ipynb").read_text())
    b = json.loads((root / "course" / name / f"{name}.ipynb").read_text())
    assert a == b, f"course/{name} is out of sync with solutions/: run `make course`"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_release_holds_no_solution(root, name):
    text = (root / "course" / name / f"{name}.ipynb").read_text()
    assert "### BEGIN SOLUTION" not in text and "### END SOLUTION" not in text
    assert not list((root / "course" / name).glob("*.py")), "the text source (with solutions) leaked into course/"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_exercise_has_a_solution_cell_and_graded_cells(root, name):
    nb = _solution_nb(root, name)
    solution_sources = "\n".join(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    for ex in registry.for_notebook(name):
        assert f"def {ex.function}(" in solution_sources, f"{ex.id}: no solution cell defines {ex.function}"
        for criterion in ex.criteria:
            cells = [c for c in graded if f'check("{ex.id}"' in c.source and f'assert_passed("{criterion}")' in c.source]
            assert len(cells) == 1, f"{ex.id}: expected one graded cell for {criterion}, found {len(cells)}"
            assert cells[0].metadata["nbgrader"]["points"] > 0


def _solution_block(nb, grade_id):
    """The solution between the markers, or the whole cell for a read-only cell that shows a kernel."""
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    src = cell.source
    if "### BEGIN SOLUTION" not in src:
        return src
    return src[src.index("### BEGIN SOLUTION") + len("### BEGIN SOLUTION") : src.index("### END SOLUTION")]


# (notebook, solution cell) -> (module in kernels/, the functions the cell must hold, in order)
SOLUTIONS_FROM_KERNELS = {
    ("01_hbm_cost_model", "fused_chain"): ("fused_chain", ["_fused_chain_kernel", "fused_chain"]),
    ("02_vertical_fusion", "rmsnorm"): ("rmsnorm", ["_rmsnorm_kernel", "rmsnorm"]),
    ("02_vertical_fusion", "add_rmsnorm"): ("add_rmsnorm", ["_add_rmsnorm_kernel", "add_rmsnorm"]),
    ("02_vertical_fusion", "layernorm"): ("layernorm", ["_layernorm_kernel", "layernorm"]),
    ("02_vertical_fusion", "rmsnorm_backward"): (
        "rmsnorm_backward", ["_rmsnorm_bwd_kernel", "_sum_partials_kernel", "_programs", "rmsnorm_backward"]),
    ("03_horizontal_fusion", "row_sum_sumsq"): (
        "row_sum_sumsq", ["_row_sum_sumsq_kernel", "sumsq_launch_settings", "row_sum_sumsq"]),
    ("03_horizontal_fusion", "qkv_projection"): (
        "qkv_projection", ["_qkv_kernel", "qkv_launch_settings", "split_qkv", "qkv_projection"]),
    ("03_horizontal_fusion", "adamw_step"): (
        "multi_tensor_adamw", ["ADAMW_BLOCK", "_ADAMW_DTYPES", "_adamw_block", "_adamw_kernel", "_Tables",
                               "_TABLE_CACHE", "_TABLE_CACHE_SIZE", "_tables", "_validate", "adamw_step"]),
    ("04_gemm_epilogue_fusion", "matmul-kernel"): ("matmul", ["grouped_tile", "tile_dot", "_matmul_kernel"]),
    ("04_gemm_epilogue_fusion", "gemm_gelu_residual"): (
        "gemm_epilogue", ["gelu_tanh", "_gemm_gelu_residual_kernel", "gemm_launch_settings", "_check_epilogue_inputs",
                          "gemm_gelu_residual"]),
    ("04_gemm_epilogue_fusion", "swiglu"): ("swiglu", ["_swiglu_kernel", "swiglu_launch_settings", "swiglu"]),
    ("05_streaming_reduction_fusion", "softmax"): (
        "softmax", ["ONE_BLOCK_MAX", "_softmax_kernel", "softmax_launch_settings", "softmax"]),
    ("05_streaming_reduction_fusion", "flash_attention"): (
        "flash_attention", ["LOG2E", "_online_softmax_step", "_visible", "_key_ranges", "_attend",
                            "_flash_attention_kernel", "attention_launch_settings", "_check_attention_inputs",
                            "flash_attention"]),
    ("05_streaming_reduction_fusion", "linear_cross_entropy"): (
        "linear_cross_entropy", ["_tile_stats", "_logit_tile_stats_kernel", "_combine_kernel", "ce_launch_settings",
                                 "_check_inputs", "linear_cross_entropy", "_combine"]),
}


def _source_of(module, name: str) -> str:
    """The source of a function, class or jit kernel of module, or of the top-level assignment to name."""
    obj = getattr(module, name)
    obj = getattr(obj, "fn", obj)
    if inspect.isfunction(obj) or inspect.isclass(obj):
        return inspect.getsource(obj)
    text = inspect.getsource(module)
    for node in ast.parse(text).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.get_source_segment(text, node)
    raise LookupError(f"kernels/{module.__name__}: no top-level definition of {name}")


@pytest.mark.parametrize("notebook,cell", list(SOLUTIONS_FROM_KERNELS), ids=lambda v: str(v))
def test_solution_cell_is_the_reference_kernel(root, notebook, cell):
    """Solution cells and kernels/ must not drift: the same kernels and launchers, statement for statement."""
    import importlib

    module_name, names = SOLUTIONS_FROM_KERNELS[(notebook, cell)]
    module = importlib.import_module(f"kernels.{module_name}")
    block = _solution_block(_solution_nb(root, notebook), cell)
    expected = "\n\n".join(_source_of(module, n) for n in names)
    assert ast.dump(ast.parse(textwrap.dedent(block))) == ast.dump(ast.parse(expected)), (
        f"solutions/{notebook} cell {cell!r} differs from kernels/{module_name}.py"
    )


def test_numeric_solutions_agree_with_the_grader(root):
    nb = _solution_nb(root, "01_hbm_cost_model")
    ns = {}
    for grade_id in ("chain_times", "layer_traffic"):
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
        exec(cell.source, ns)
    from autograder.notebooks import nb01

    assert ns["chain_times"](3, 1e9, 2e12, 5e-6) == pytest.approx(nb01.chain_times_reference(3, 1e9, 2e12, 5e-6))
    assert ns["layer_traffic"](*nb01.LLAMA2_7B) == pytest.approx(nb01.layer_traffic_reference(*nb01.LLAMA2_7B))
