"""Every benchmark figure, drawn from the committed results (bench/results/*.json) and saved next to them.

    python -m bench.plots                 # every figure of every committed run
    python -m bench.plots RUN.json ...    # the figures of these runs only
    python -m bench.plots --out DIR       # into DIR instead of next to each run

A suite run (python -m bench) gives <run>.png: elementwise chains, the memory-bound kernels against the copy
peak, and where measured the GEMM epilogues and the streaming reductions. A run with the capstone's rows gives
<run>-capstone.png (a capstone-* run: <run>.png): the loss curves, tokens/s and memory. The title of each is the
run's own device, versions and date. No GPU needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.common import RESULTS, STANDARD, load, versions


def _pyplot():
    import matplotlib  # imported here so that importing this module (the suite does) costs nothing

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _title(result: dict) -> str:
    torch_version, triton_version = versions(result)
    return f"{result['device']['name']}, torch {torch_version}, triton {triton_version}, {result['date']}"


def _epilogue_panel(ax, result_rows) -> None:
    """Each version's time over the bare product's (cuBLAS alone = 1), one group of bars per row."""
    import numpy as np

    pos = np.arange(len(result_rows))
    top = 1.0
    for i, key in enumerate(("eager", "torch.compile", "triton portable", "triton")):
        ratios = [r["ms"][key] / r["ms"][next(k for k in r["ms"] if k.startswith("cuBLAS"))] for r in result_rows]
        ax.barh(pos + (i - 1.5) * 0.2, ratios, height=0.2, label=key)
        top = max(top, *ratios)
    ax.axvline(1.0, color="k", ls=":", lw=1)
    ax.set_xlim(0.9, top + 0.03)  # the differences are a few percent: start the axis near 1
    ax.set_yticks(pos, [f"{r['kernel']}\n{r['shape']}" for r in result_rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time / time of the bare cuBLAS product(s)")
    ax.set_title("GEMM + epilogue (notebook 04)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _streaming_panel(ax, result_rows) -> None:
    """Each version's time over the library's (softmax: torch.softmax, attention: SDPA, cross-entropy:
    torch.compile), one group of bars per row."""
    import numpy as np

    baseline = {"softmax": "torch.softmax", "flash_attention": "SDPA", "linear_cross_entropy": "torch.compile"}
    pos = np.arange(len(result_rows))
    for i, key in enumerate(("eager or naive", "triton portable", "triton")):
        vals = []
        for r in result_rows:
            ms = r["ms"]
            k = ("naive" if "naive" in ms else "eager") if key == "eager or naive" else key
            vals.append(ms[k] / ms[baseline[r["kernel"]]] if k in ms else np.nan)
        ax.barh(pos + (i - 1) * 0.27, vals, height=0.27, label=key)
    ax.axvline(1.0, color="k", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yticks(pos, [f"{r['kernel']} (vs {baseline[r['kernel']]})\n{r['shape']}" for r in result_rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time / the library's time (log scale)")
    ax.set_title("streaming reductions (notebook 05)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def suite_figure(result: dict, path: Path) -> Path:
    """A suite run: elementwise chains by length, the memory-bound kernels as fractions of the copy peak."""
    import numpy as np

    plt = _pyplot()
    rows = [r for r in result["rows"] if r["kernel"].startswith("op_chain")]
    n = [int(r["kernel"].split("=")[1]) for r in rows]
    extra = [(panel, result[key]) for key, panel in (("epilogue_rows", _epilogue_panel),
                                                     ("streaming_rows", _streaming_panel)) if result.get(key)]
    fig, axes = plt.subplots(1, 2 + len(extra), figsize=(13 + 7 * len(extra), 4.5),
                             gridspec_kw={"width_ratios": [2, 3] + [3] * len(extra)})
    ax, bx = axes[:2]
    for panel_ax, (panel, panel_rows) in zip(axes[2:], extra):
        panel(panel_ax, panel_rows)
    for key, style in (("eager", "o-"), ("torch.compile", "s-"), ("triton", "^-")):
        ax.plot(n, [r["ms"][key] for r in rows], style, label=key)
    ax.set_xlabel("ops in the chain")
    ax.set_ylabel("median ms (2^26 fp32)")
    ax.set_title("elementwise chains")
    ax.grid(alpha=0.3)
    ax.legend()
    others = [r for r in result["rows"] if not r["kernel"].startswith("op_chain")]
    copy = result["device"]["copy_gbps"]
    pos = np.arange(len(others))
    for i, key in enumerate(STANDARD):
        bx.barh(pos + (i - 1) * 0.27, [r["GBps"][key] / copy for r in others], height=0.27, label=key)
    bx.set_yticks(pos, [r["kernel"] for r in others])
    bx.invert_yaxis()
    bx.axvline(1.0, color="k", ls=":", lw=1)
    bx.set_xlabel("fraction of measured copy bandwidth (minimal bytes / time)")
    bx.set_title("memory-bound kernels")
    bx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.suptitle(_title(result))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def capstone_figure(result: dict, path: Path) -> Path:
    """The capstone's loss curves, tokens/s and peak memory (rows of python -m bench.capstone)."""
    plt = _pyplot()
    curve = next(r for r in result["rows"] if r["kernel"] == "decoder_loss_curve")
    steps = [r for r in result["rows"] if r["kernel"] == "decoder_step"]
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(17, 4.6))
    for name, losses in curve["losses"].items():
        ax.plot(range(1, len(losses) + 1), losses, label=f"{name} (last 20: {curve['last20'][name]:.3f})", lw=1)
    ax.set(xlabel="step", ylabel="training loss (nats)", title=f"loss, {curve['shape']}", ylim=(None, 8))
    ax.legend(fontsize=8)
    names = list(steps[0]["ms"])
    width = 0.8 / len(steps)
    for i, r in enumerate(steps):
        bx.barh([j + i * width for j in range(len(names))], [r["ktokens_per_s"][n] for n in names], height=width,
                label=r["shape"].split(",")[0])
        mem_names = list(r["extra_GiB"])
        cx.barh([j + i * width for j in range(len(mem_names))], [r["extra_GiB"][n] for n in mem_names],
                height=width, label=r["shape"].split(",")[0])
    bx.set_yticks([j + width / 2 for j in range(len(names))], names, fontsize=8)
    bx.set(xlabel="k tokens/s, forward and backward", title="speed")
    cx.set_yticks([j + width / 2 for j in range(len(mem_names))], mem_names, fontsize=8)
    cx.set(xlabel="GiB at the peak beyond the parameters", title="memory")
    bx.legend(fontsize=8)
    cx.legend(fontsize=8)
    fig.suptitle(_title(result), fontsize=9)
    plt.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figures(path: Path, out: Path | None = None) -> list[Path]:
    """Draw the figures of one run; returns the files written (none for a run with nothing to draw)."""
    path = Path(path)
    result = load(path)
    folder = out or path.parent
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    if isinstance(result.get("rows"), list) and any(r.get("kernel", "").startswith("op_chain") for r in result["rows"]):
        written.append(suite_figure(result, folder / f"{path.stem}.png"))
    rows = result.get("training_rows") or (result["rows"] if isinstance(result.get("rows"), list) else [])
    if any(r.get("kernel") == "decoder_loss_curve" for r in rows):
        name = f"{path.stem}.png" if path.stem.startswith("capstone") else f"{path.stem}-capstone.png"
        written.append(capstone_figure({**result, "rows": rows}, folder / name))
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="JSON of runs (default: every committed run)")
    parser.add_argument("--out", type=Path, help="folder for the figures (default: next to each run)")
    args = parser.parse_args(argv)
    for path in args.runs or sorted(RESULTS.rglob("*.json")):
        for written in figures(path, args.out):
            print(f"saved {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
