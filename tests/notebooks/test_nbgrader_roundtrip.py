"""A real nbgrader round trip on the CPU: release, three submissions per notebook, autograde, export, feedback.

alice hands in the solutions, bob the untouched release, carol one planted bug per exercise. The grading
configuration (the course's grading.toml, with one random trial a check: classroom.one_trial_settings) requires
performance to be measured, so on this GPU-less machine every performance cell scores 0 for everyone, and every
other cell is decided by the code alone.

Each notebook is one course folder and one round trip (the release comes from the `released` fixture, which
test_notebooks.py compares with the committed course/), so the notebooks grade in parallel.
"""

import csv
import html
import subprocess

import diagrams_shown
import nbformat
import pytest

from autograder import runtime
from autograder.publish import build

pytestmark = pytest.mark.slow
NB1, NB2, NB3, NB4 = "01_hbm_cost_model", "02_vertical_fusion", "03_horizontal_fusion", "04_gemm_epilogue_fusion"
NB5, NB6, NB7 = "05_streaming_reduction_fusion", "06_compiler_fusion", "07_fusion_for_training"
NOTEBOOKS = [NB1, NB2, NB3, NB4, NB5, NB6, NB7]
GPU_ONLY = ("_performance", "_kernels")  # cells whose criterion needs a GPU: required, so 0 here for everyone

# carol's submissions: grade_id -> the cell she hands in (a full source, or an (old, new) edit of the solution).
CAROL = {
    NB1: {
        "chain_times": """
def chain_times(n_ops, size_bytes, bandwidth, launch_s):
    t = 2 * size_bytes / bandwidth
    return n_ops * t, t + launch_s          # forgets the launches of the unfused chain
""",
        "fused_chain": """
import torch
def fused_chain(x, bias, alpha):
    # right numbers (fp32 math, one rounding), but torch does the work: no Triton kernel
    return (alpha * torch.nn.functional.silu(x.float() + bias.float())).to(x.dtype)
""",
        "layer_traffic": None,  # the solution
        "block_copy": None, "tile_copy": None, "add_row": None, "row_sum": None,
        # The masked-off lanes of the running max loaded as 0: every graded row is negative, so 0 wins.
        "row_max": ('mask=cols < N, other=float("-inf"))', "mask=cols < N, other=0.0)"),
        # The repair half done: the kernel compiles, but its store is still unmasked.
        "clamp": ("    tl.store(y_ptr + offs, y, mask=mask)\n", "    tl.store(y_ptr + offs, y)\n"),
        "q-launch-bound": None, "q-wrong-mask": None, "q-rmsnorm-count": None,
    },
    NB2: {
        "predicted_rmsnorm_bytes": None, "q-two-pass": None, "q-accumulator": None,
        "predicted_add_rmsnorm_bytes": None, "predicted_layernorm_bytes": None, "predicted_repair_bytes": None,
        "predicted_backward_bytes": None, "predicted_dropout_add_rmsnorm_bytes": None, "q-add": None,
        "q-layernorm": None, "q-repair": None, "q-backward": None, "q-dropout": None,
        # The offsets number the columns only: every row draws the same dropout mask.
        "dropout_add_rmsnorm": ("keep = tl.rand(seed, row * H + cols) > p", "keep = tl.rand(seed, cols) > p"),
        "rmsnorm": ("rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + tl.cast(eps, tl.float32))",
                    "rstd = 1.0 / (tl.sqrt(tl.sum(x * x, axis=0) / H) + eps)"),
        "add_rmsnorm": ("    sf = s.to(tl.float32)\n", "    sf = x.to(tl.float32)\n"),
        "layernorm": ("    xc = tl.where(mask, d - mean_d, 0.0)  # the padding lanes must not count in the variance\n"
                      "    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / H + eps)\n",
                      "    mean = tl.sum(x, axis=0) / H\n"
                      "    xc = tl.where(mask, x - mean, 0.0)\n"
                      "    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H - mean * mean + eps)\n"),
        "rmsnorm_repaired": "def rmsnorm_repaired(x, weight, eps):\n    return rmsnorm_buggy(x, weight, eps)  # not repaired\n",
        "rmsnorm_backward": ("dx = rstd * (g - xhat * (tl.sum(g * xhat, axis=0) / H))", "dx = rstd * g"),
    },
    NB3: {
        "predicted_row_stats_bytes": None, "adamw_helpers": None, "q-prefill": None, "q-graph": None,
        "row_sum_sumsq": ("tl.store(sumsq_ptr + rows, tl.sum(acc_sq, axis=1), mask=row_mask)",
                          "tl.store(sumsq_ptr + rows, tl.sum(acc, axis=1) * tl.sum(acc, axis=1), mask=row_mask)"),
        "qkv_projection": ("    return split_qkv(out, kv_width)\n",
                           "    return tuple(t.contiguous() for t in split_qkv(out, kv_width))\n"),
        "adamw_step": ("    step_size = lr / (1.0 - beta1**step)\n    rsqrt_bc2 = 1.0 / math.sqrt(1.0 - beta2**step)\n",
                       "    step_size = lr\n    rsqrt_bc2 = 1.0\n"),
    },
    NB4: {
        "gemm_gelu_residual": ("    y = gelu_tanh(acc + bias[None, :], APPROX_TANH) + res.to(tl.float32)\n",
                               "    y = gelu_tanh(acc + bias[None, :] + res.to(tl.float32), APPROX_TANH)\n"),
        "swiglu": ("    h = tl.fdiv(gate, 1.0 + tl.exp(-gate)) * up", "    h = tl.fdiv(1.0, 1.0 + tl.exp(-gate)) * up"),
        "predicted_epilogue_bytes": None, "predicted_lora_overhead": None,
        # The scale s forgotten: the adapter's term is added unscaled.
        "lora": ("acc = tl.dot((xa * scale).to(bt.dtype), bt, acc,", "acc = tl.dot(xa.to(bt.dtype), bt, acc,"),
    },
    NB5: {
        "softmax": ("(e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty)", "e.to(y_ptr.dtype.element_ty)"),
        "flash_attention": ("        LOG2E / math.sqrt(D), HEAD_DIM=D", "        LOG2E, HEAD_DIM=D"),
        # Logits rounded to float16 before the statistics: close enough for the memory check, not for the others.
        "linear_cross_entropy": ("logits = tl.where(rv[None, :] < V, logits, -float(\"inf\"))",
                                 "logits = tl.where(rv[None, :] < V, logits.to(tl.float16).to(tl.float32), "
                                 "-float(\"inf\"))"),
        "predicted_attention_bytes": None, "predicted_router_bytes": None, "moe_router": None,
        "flash_attention_torch": None,
        "predicted_sparse_head_bytes": None, "sparse_head": None,
        # Eager softmax counted as its five kernels, one trip of x each: three of them read and write.
        "predicted_softmax_bytes": ("return 8 * x, 2 * x, 3 * x", "return 5 * x, 2 * x, 3 * x"),
    },
    NB6: {
        "rmsnorm_op": ("RMSNORM_OP_AUTOGRAD = rmsnorm_op.register_autograd(_rmsnorm_op_backward, "
                       "setup_context=_rmsnorm_op_setup)", "RMSNORM_OP_AUTOGRAD = None  # the backward forgotten"),
        # The version handed out to repair, handed back as it was: right numbers, two graphs.
        "fake_quant": "def fake_quant(x):\n    return compiler_fusion.fake_quant_broken(x)\n",
        # The row stride forgotten: the padded case reads the wrong rows.
        "row_argmax": ("_row_argmax_tuned[(m,)](x, out, n, x.stride(0),", "_row_argmax_tuned[(m,)](x, out, n, n,"),
        # The fused chain's prediction forgets the residual it reads.
        "predicted_traffic": ("fused_chain = 3 * x + vec", "fused_chain = 2 * x + vec"),
        "q-custom-op": None, "q-graph-break": None, "q-autotune-key": None,
    },
    NB7: {
        # The scores' 1/sqrt(D) left out of dQ and dK (both launches); dV is right.
        "flash_attention_backward": ("LOG2E * scale, scale, **common,", "LOG2E * scale, 1.0, **common,"),
        # dlogits = p - y, not divided by M: the loss is the mean, its gradients are those of the sum.
        "linear_cross_entropy_forward_backward": ("(g * inv_m).to(", "g.to("),
        # The embedding's backward copies each token's gradient instead of adding it: a token seen twice keeps
        # one. (Her decoder also runs her attention backward above.) Eight training steps still follow eager's.
        "decoder_loss": ("grad.index_add_(0, ids, dx.float())", "grad.index_copy_(0, ids, dx.float())"),
        # The log-sum-exp counted in the inputs' dtype, not float32.
        "saved_for_backward": ("flash = rows * d * elem_bytes + rows * 4", "flash = rows * d * elem_bytes + rows * elem_bytes"),
        "q-two-kernels": None, "q-chunk-size": None, "q-capstone-speed": None,
        "attention_flops": None, "logits_bytes": None, "flash_attention_torch-paste": None,
        "q-backward-rate": None, "q-logits-held": None,
    },
}
# Cells that must score 0 for carol (besides performance, 0 for everyone here). Her fused_chain has the right
# numbers, but torch computes them: correctness and precision name that, fusion names the missing kernel.
CAROL_FAILS = {
    NB1: {"test_cost_model", "test_fused_chain_correctness", "test_fused_chain_precision", "test_fused_chain_fusion",
          "test_warmup_running_max", "test_warmup_repair"},
    NB2: {f"test_{ex}_{c}" for ex in ("rmsnorm", "add_rmsnorm", "layernorm", "rmsnorm_repair", "rmsnorm_backward")
          for c in ("correctness", "precision")} | {"test_dropout_add_rmsnorm_correctness"},
    # q, k, v returned as copies: the outputs were last written by torch, not the kernel (correctness and
    # precision say so), and they are not views of one buffer (fusion).
    NB3: {"test_row_sum_sumsq_correctness", "test_row_sum_sumsq_precision", "test_qkv_projection_correctness",
          "test_qkv_projection_precision", "test_qkv_projection_fusion", "test_adamw_step_correctness",
          "test_adamw_step_precision"},
    NB4: {f"test_{ex}_{c}" for ex in ("gemm_gelu_residual", "swiglu", "lora") for c in ("correctness", "precision")},
    NB5: {f"test_{ex}_{c}" for ex in ("softmax", "flash_attention", "linear_cross_entropy")
          for c in ("correctness", "precision")} | {"test_predict_softmax_bytes"},
    NB6: {"test_rmsnorm_op_correctness", "test_fake_quant_graph", "test_row_argmax_correctness", "test_predict_traffic"},
    # The gradients M times too large: memory is not judged on a wrong result, so its cell fails too.
    NB7: {f"test_{ex}_{c}" for ex in ("flash_attention_backward", "linear_cross_entropy_backward")
          for c in ("correctness", "precision")} | {"test_linear_cross_entropy_backward_memory",
                                                    "test_decoder_correctness", "test_predict_saved"},
}
# What carol's feedback must say, per notebook.
CAROL_FEEDBACK = {
    NB1: ["no Triton kernel ran", "the result was computed by torch", "launch overhead", "not measured (no GPU)",
          "masked-off lanes counted as 0", "a store without a correct mask"],
    NB2: ["eps added after the square root", "x is normalised instead of the sum", "E[x^2] - E[x]^2",
          "grows like H^", "leaves out the term", "neighbouring rows agree"],
    NB3: ["square of the sum", "views (slices) of the one buffer", "computed by torch", "no bias correction"],
    NB4: ["the residual went inside the GELU", "SiLU is gate * sigmoid(gate)", "the scale s is missing"],
    NB5: ["never divided by the row's sum", "not scaled by 1/sqrt(D)", "the logits were rounded to the inputs' dtype",
          "allowed", "eight trips"],
    NB6: ["register_autograd", "Tensor.item()", "5x4097 padded", "not counted (no GPU)", "still reads the residual r"],
    NB7: ["lack the 1/sqrt(D) of the scores", "the gradients are not divided by M", "the gradient of embed",
          "the log-sum-exp is float32"],
}
POINTS = {NB1: (24, 18), NB2: (66, 46), NB3: (35, 25), NB4: (41, 27), NB5: (73, 55), NB6: (28, 15), NB7: (53, 39)}  # (total, without the performance cells
# and the written answers, which nbgrader leaves to a person: q-* cells, 1 point each in notebooks 01 and 04 to 07)


def _nbgrader(work, *args, env=None):
    return subprocess.run(
        build.nbgrader_command(*args, f"--db=sqlite:///{work}/gradebook.db", "--log-level=ERROR"),
        cwd=work, capture_output=True, text=True, env={**build.tool_env(), **(env or {})}, timeout=1800,
    )


def _submit(work, student, name, answers):
    release = nbformat.read(work / "course" / name / f"{name}.ipynb", as_version=4)
    source = nbformat.read(work / "solutions" / name / f"{name}.ipynb", as_version=4)
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    for cell in release.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid not in answers:
            continue
        answer = answers[gid]
        if answer is None or answer == "solution":
            cell.source = solutions[gid]
        elif isinstance(answer, tuple):
            old, new = answer
            assert old in solutions[gid], f"planted bug for {gid} no longer applies to the solution"
            cell.source = solutions[gid].replace(old, new)
        else:
            cell.source = answer
    folder = work / "submitted" / student / name
    folder.mkdir(parents=True)
    nbformat.write(release, folder / f"{name}.ipynb")


def _round_trip(work, name):
    """Submit, autograde, give feedback and export one notebook in the course folder `released` made."""
    solution_ids = [c.metadata["nbgrader"]["grade_id"]
                    for c in nbformat.read(work / "solutions" / name / f"{name}.ipynb", as_version=4).cells
                    if c.metadata.get("nbgrader", {}).get("solution")]
    _submit(work, "alice", name, {gid: "solution" for gid in solution_ids})
    _submit(work, "bob", name, {})
    _submit(work, "carol", name, CAROL[name])
    # alice's notebook runs whole, demonstrations included, as a student's Run All does on a laptop: the one
    # place the suite runs every demonstration in Triton's interpreter (but the try cells, which autograde skips:
    # the graded cells after each check the same). bob and carol are graded as grade-class
    # grades a class, with the demonstrations skipped (their plots are for the reader, and no graded cell needs
    # them): the same grades, without running the demonstrations two more times.
    r = _nbgrader(work, "autograde", name, "--force", "--student=alice")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _nbgrader(work, "autograde", name, "--force", "--CourseDirectory.student_id_exclude=alice",
                  env={runtime.SMALL_DEMOS_ENV: "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    r = _nbgrader(work, "generate_feedback", name, "--force")
    assert r.returncode == 0, r.stderr
    r = _nbgrader(work, "export", "--to", str(work / "grades.csv"))
    assert r.returncode == 0, r.stderr
    with open(work / "grades.csv") as f:
        rows = {(row["student_id"], row["assignment"]): row for row in csv.DictReader(f)}
    return work, rows


_GRADED = {}  # notebook -> (course folder, CSV rows): one round trip per notebook and test process


@pytest.fixture
def graded(released, name):
    # Each notebook has a course folder of its own, so the five round trips can run on different cores
    # (conftest keeps a notebook's tests on one worker, so each runs once).
    if name not in _GRADED:
        _GRADED[name] = _round_trip(released(name), name)
    return _GRADED[name]


def _scores(work, student, name):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{work}/gradebook.db") as gb:
        nb = gb.find_submission_notebook(name, name, student)
        return {g.name: (g.score, g.max_score) for g in nb.grades}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_solution_gets_full_marks_on_every_cpu_gradable_cell(graded, name):
    work, _ = graded
    scores = _scores(work, "alice", name)
    for cell, (score, max_score) in scores.items():
        if cell.startswith("q-"):  # a written answer: 0 until a person grades it
            assert score == 0, cell
        elif cell.endswith(GPU_ONLY):
            assert score == 0, "grading.toml requires performance: without a GPU it must not pass"
        else:
            assert score == max_score > 0, (cell, score, max_score)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_untouched_release_scores_zero(graded, name):
    work, rows = graded
    assert all(score == 0 for score, _ in _scores(work, "bob", name).values())
    assert float(rows[("bob", name)]["raw_score"]) == 0


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_planted_bugs_fail_exactly_the_expected_cells(graded, name):
    work, _ = graded
    scores = _scores(work, "carol", name)
    failed = {cell for cell, (score, _) in scores.items() if score == 0 and not cell.startswith("q-")}
    performance = {cell for cell in scores if cell.endswith(GPU_ONLY)}
    assert failed == CAROL_FAILS[name] | performance


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_csv_has_every_student_with_the_right_totals(graded, name):
    work, rows = graded
    total, cpu_points = POINTS[name]
    for student in ("alice", "bob", "carol"):
        assert float(rows[(student, name)]["max_score"]) == total
    assert float(rows[("alice", name)]["raw_score"]) == cpu_points
    lost = sum(mx for cell, (_, mx) in _scores(work, "carol", name).items() if cell in CAROL_FAILS[name])
    assert float(rows[("carol", name)]["raw_score"]) == cpu_points - lost


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_feedback_names_the_failures(graded, name):
    work, _ = graded
    text = html.unescape((work / "feedback" / "carol" / name / f"{name}.html").read_text())
    for phrase in CAROL_FEEDBACK[name]:
        assert phrase in text, phrase


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_feedback_shows_every_diagram_inline_with_its_alt_text(root, graded, name):
    # nbgrader writes the feedback page alone, without the notebook's folder: a picture must be in the page itself.
    work, _ = graded
    page = (work / "feedback" / "bob" / name / f"{name}.html").read_text()
    assert diagrams_shown.expected(root, name), f"{name} shows no diagram"
    assert diagrams_shown.not_shown(root, name, page) == []


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_alice_runs_every_demonstration_and_the_others_skip_them(graded, name):
    """alice runs every demonstration but the try cells, which autograde skips (the graded cells after each do
    its work); bob and carol, under the grader's switch, skip them all."""
    from autograder.demonstrations import DEMONSTRATION_SKIPPED, TRY_SKIPPED, is_demonstration, is_try

    work, _ = graded

    def demonstrations(student):
        nb = nbformat.read(work / "autograded" / student / name / f"{name}.ipynb", as_version=4)
        return [c for c in nb.cells if c.cell_type == "code" and is_demonstration(c.source)]

    def said(cell, line):
        return any(line in o.get("text", "") for o in cell.get("outputs", []))

    alice = demonstrations("alice")
    assert [c for c in alice if not is_try(c.source)], f"{name} has no demonstration cell but try cells"
    assert not any(said(c, DEMONSTRATION_SKIPPED) for c in alice)
    assert all(said(c, TRY_SKIPPED) == is_try(c.source) for c in alice)
    for student in ("bob", "carol"):
        assert all(said(c, DEMONSTRATION_SKIPPED) for c in demonstrations(student)), student
