"""Plots the notebooks share: the roofline of the reader's device, measured times against the model."""

from __future__ import annotations

import numpy as np

from autograder.measure.device import REFERENCE_H200, DeviceProfile


def peaks(profile: DeviceProfile, dtype: str = "bf16") -> tuple[float, float, str]:
    """(bandwidth GB/s, matmul TFLOP/s, label) from the profile, or the H200 reference without a GPU."""
    if profile.has_gpu:
        return profile.copy_gbps, profile.matmul_tflops[dtype], f"{profile.name} (measured)"
    return REFERENCE_H200["copy_gbps"], REFERENCE_H200["matmul_tflops"]["bf16"], REFERENCE_H200["name"]


def launch_seconds(profile: DeviceProfile) -> float:
    """The measured launch time, or the H200 reference's without a GPU."""
    return (profile.launch_us if profile.has_gpu else REFERENCE_H200["launch_us"]) * 1e-6


def roofline(ax, profile: DeviceProfile, points=(), dtype: str = "bf16"):
    """Draw attainable TFLOP/s against arithmetic intensity (FLOP/byte) on ax.

    points: (label, intensity, achieved TFLOP/s or None). None marks where an op sits, not what it reached.
    """
    bw, peak, label = peaks(profile, dtype)
    ai = np.logspace(-2, 4, 400)
    ax.loglog(ai, np.minimum(peak, bw * 1e9 * ai / 1e12), color="k", lw=2, label=f"roofline: {label}")
    ridge = peak * 1e12 / (bw * 1e9)
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak * 0.02), rotation=90, va="bottom", ha="right", fontsize=8)
    for i, (name, intensity, achieved) in enumerate(points):
        color = f"C{i % 10}"
        bound = min(peak, bw * 1e9 * intensity / 1e12)
        if achieved is None:
            ax.plot([intensity], [bound], "o", mfc="none", color=color, label=f"{name} (ceiling)")
        else:
            ax.plot([intensity], [achieved], "o", color=color, label=f"{name}: {achieved:.3g} TFLOP/s")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax


def bars_against_model(ax, measured: dict, model: dict, xlabel: str, title: str, on_gpu: bool):
    """Horizontal bars of measured times, each with its model prediction as a dashed tick across it.

    Without a GPU nothing is measured: the model's entries are drawn alone, and the title says so.
    """
    names = list(measured) if on_gpu else list(model)
    ax.barh(names, [measured.get(n, 0) for n in names], color="C0", label="measured")
    for i, n in enumerate(names):
        if n in model:
            ax.plot([model[n]] * 2, [i - 0.4, i + 0.4], "k--", lw=2, label="model: bytes / copy BW" if i == 0 else None)
    ax.set_xlabel(xlabel)
    ax.set_title(title + ("" if on_gpu else " — model only, no GPU here"))
    ax.legend(fontsize=8)
    return names


def print_against_model(names, measured: dict, model: dict, n_bytes: float, copy_gbps: float) -> None:
    """One line per version: its time and effective bandwidth (n_bytes, the op's minimal bytes), and the model."""
    width = max(map(len, names), default=0) + 2
    for n in names:
        got = "not measured"
        if n in measured:
            gbps = n_bytes / (measured[n] * 1e6)
            got = f"{measured[n]:.3f} ms, {gbps:5.0f} GB/s effective = {gbps / copy_gbps:.2f} of copy"
        model_ms = f"model {model[n]:.3f} ms" if n in model else ""
        print(f"{n:<{width}} {got:<48} {model_ms}")


def kernel_timeline(ax, prof, title: str, triton_names=()) -> dict:
    """One step's GPU kernels from a torch.profiler profile, as bars on a time axis, one row per kind: Triton
    kernels (those named in triton_names, or any whose name starts with an underscore or "triton_"), cuBLAS
    GEMMs, everything else. Returns {kind: total ms}."""
    from torch.autograd import DeviceType

    rows = {"Triton kernels": [], "cuBLAS GEMMs": [], "other PyTorch kernels": []}
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA and e.time_range.end > e.time_range.start]
    if not events:
        ax.text(0.5, 0.5, "no GPU kernels recorded", ha="center", transform=ax.transAxes)
        return {k: 0.0 for k in rows}
    t0 = min(e.time_range.start for e in events)
    for e in events:
        name = e.name
        if name in triton_names or name.startswith(("_", "triton_")):
            kind = "Triton kernels"
        elif any(s in name.lower() for s in ("gemm", "nvjet", "cutlass", "sm90_xmma", "ampere_")):
            kind = "cuBLAS GEMMs"
        else:
            kind = "other PyTorch kernels"
        rows[kind].append(((e.time_range.start - t0) / 1e3, (e.time_range.end - e.time_range.start) / 1e3))
    for i, (kind, spans) in enumerate(rows.items()):
        ax.broken_barh(spans, (i - 0.4, 0.8), color=f"C{i}")
    ax.set_yticks(range(len(rows)), [f"{k}\n{sum(d for _, d in s):.2f} ms" for k, s in rows.items()], fontsize=8)
    ax.set_xlabel("ms since the step's first kernel")
    ax.set_title(title)
    return {k: sum(d for _, d in s) for k, s in rows.items()}
