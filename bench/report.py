"""docs/benchmarks.md, written from the committed runs in bench/results/ alone (no GPU needed).

    python -m bench.report            # write docs/benchmarks.md
    python -m bench.report --check    # exit 1 if docs/benchmarks.md is not what the runs give

One section per device; in it every run, each under a heading with its own file, device, torch and triton versions
and date: the suite (reference kernels against eager PyTorch, torch.compile and their peers), the peers alone,
compiler-driven fusion, the training kernels and the capstone, the grading headroom, the seconds to grade a
notebook, grade-class on several GPUs. Runs of one device that disagree about a figure are listed side by side at
the end of its section rather than one of them chosen. Before the devices, what grading a class costs in GPU-hours
(bench.budget), from the grading and scale runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import budget, capstone, compiler, grading, headroom, hopper, peers, scale, suite, training
from bench.common import RESULTS, load, versions

ROOT = RESULTS.parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
PINNED = "torch 2.13 and triton 3.7.1"
DISAGREE = 1.25  # two runs whose figures differ by more than this factor are listed side by side

# The kinds of run, in the order a device's section shows them: (kind, heading, body(result) -> lines).
KINDS = (
    ("suite", "Reference kernels against eager PyTorch, torch.compile and their peers (`python -m bench`)",
     lambda r: suite.markdown(r).splitlines()),
    ("peers", "The course against its peers (`python -m bench.peers`)", lambda r: peers.markdown(r["rows"])),
    ("compiler", "Compiler-driven fusion (`python -m bench.compiler`)", lambda r: compiler.markdown(r["rows"])),
    ("training", "Training kernels (`python -m bench.training`)", lambda r: training.markdown(r["rows"])),
    ("capstone", "The capstone's training step (`python -m bench.capstone`)",
     lambda r: capstone.markdown(r["rows"])),
    ("headroom", "Grading headroom (`python -m bench.headroom`)",
     lambda r: headroom.markdown(r).splitlines()[1:]),
    ("explore", "Grading headroom, exploratory runs (other shapes or settings; not the grading's)",
     lambda r: headroom.markdown(r).splitlines()[1:]),
    ("grading", "Seconds to grade a solution notebook (`python -m bench.grading`)",
     lambda r: grading.markdown(r).splitlines()[1:]),
    ("scale", "grade-class on one GPU and on every GPU (`python -m bench.scale`)",
     lambda r: scale.markdown(r).splitlines()[1:]),
    ("hopper", "How far Triton gets on Hopper (`python -m bench.hopper`)",
     lambda r: hopper.markdown(r).splitlines()[1:]),
)


def kind(path: Path) -> str | None:
    """What a committed run is, from where it lies; None for the parts a merged headroom table stands for."""
    parts = path.relative_to(RESULTS).parts
    if len(parts) == 1 or parts[0] == "runs":
        return "suite"
    if parts[0] == "training":
        return "capstone" if path.stem.startswith("capstone") else "training"
    if parts[0] == "headroom":  # headroom/parts/ are merged into headroom/headroom-<gpu>.json
        return "headroom" if len(parts) == 2 else "explore" if parts[1] == "explore" else None
    return parts[0] if parts[0] in {k for k, _, _ in KINDS} else None


def runs() -> dict[str, list[tuple[str, str, dict]]]:
    """device name -> [(kind, file relative to the results, run)], in file order."""
    out: dict = {}
    for path in sorted(RESULTS.rglob("*.json")):
        k = kind(path)
        if k is None:
            continue
        result = load(path)
        out.setdefault(result["device"]["name"], []).append((k, path.relative_to(RESULTS).as_posix(), result))
    return out


def heading(name: str, result: dict) -> list[str]:
    torch_version, triton_version = versions(result)
    d = result["device"]
    driver = f", driver {d['driver']}" if d.get("driver") else ""
    liger = f", Liger-Kernel {result['liger_kernel']}" if result.get("liger_kernel") else ""
    lines = ["", f"#### `{name}`", "", f"{d['name']}{driver}, torch {torch_version}, triton {triton_version}{liger}, "
             f"measured {result['date']}."]
    if result.get("note"):
        lines += ["", result["note"]]
    return lines


def figures(name: str) -> list[str]:
    """Where the figures drawn from a run (python -m bench.plots) are committed: named, not linked, as the
    documentation site holds docs/ only."""
    stem = (RESULTS / name).with_suffix("")
    found = [p for p in (stem.with_suffix(".png"), stem.parent / f"{stem.name}-capstone.png") if p.is_file()]
    return ["", "Figure: " + ", ".join(f"`{p.relative_to(ROOT).as_posix()}`" for p in found) + "."] if found else []


def _figures_of(result: dict):
    """(what, version, value) for the figures two runs can be compared by: fractions of the copy peak or of
    SDPA, and the course against its best peer."""
    for r in result.get("rows", []) if isinstance(result.get("rows"), list) else []:
        if isinstance(r.get("fraction_of_copy"), float) and "kernel" in r:
            yield f"{r['kernel']} {r['shape']}", "of copy", r["fraction_of_copy"]
    for r in result.get("compiler_rows", []) + (result["rows"] if result.get("part") == "compiler" else []):
        for version, v in r.get("fraction_of_copy", {}).items():
            yield f"{r['kernel']} {r['shape']}", f"{version}, of copy", v
    for r in result.get("streaming_rows", []):
        if "fraction_of_sdpa" in r:
            yield f"{r['kernel']} {r['shape']}", "of SDPA", r["fraction_of_sdpa"]
    for r in result.get("peer_rows", []) + (result["rows"] if result.get("part") == "peers" else []):
        if r.get("vs_best_peer"):
            yield f"{r['op']} {r['shape']}", "vs best peer", r["vs_best_peer"]


def disagreements(device_runs) -> list[str]:
    """A table of every figure that the device's runs measured more than DISAGREE apart, each run with its date."""
    seen: dict = {}
    for k, name, result in device_runs:
        if k in ("compiler", "peers"):
            result = {**result, "part": k}
        for what, version, value in _figures_of(result):
            seen.setdefault((what, version), []).append((name, result["date"], value))
    rows = []
    for (what, version), found in sorted(seen.items()):
        values = [v for _, _, v in found]
        if len(found) > 1 and min(values) > 0 and max(values) / min(values) > DISAGREE:
            runs_text = "; ".join(f"{v:.2f} in `{name}` ({date})" for name, date, v in found)
            rows.append(f"| {what} | {version} | {runs_text} |")
    if not rows:
        return []
    return ["", "### Where the runs disagree", "",
            f"Figures that this device's runs measured more than {DISAGREE:.2f}x apart, each with its run: none is "
            "chosen over the others (the runs differ in date, code or machine, as their headings say).", "",
            "| what | figure | runs |", "|---|---|---|", *rows]


def render() -> str:
    lines = ["# Benchmarks", "",
             "Generated by `python -m bench.report` from the runs committed in `bench/results/` "
             "(one JSON file a run, with its device, versions and date); do not edit by hand. The figures are "
             "drawn from the same files by `python -m bench.plots`.", "",
             f"The repository pins {PINNED} for CPU machines (constraints.txt); these figures were measured on GPUs "
             "with the versions shown above each table, which may be older. Where one device has several runs of "
             "the same benchmark, each is shown with its own date."]
    every = runs()
    notebooks = [p.stem for p in grading.notebooks(None)]
    lines += budget.render({device: ([(n, r) for k, n, r in device_runs if k == "grading"],
                                     [(n, r) for k, n, r in device_runs if k == "scale"])
                            for device, device_runs in every.items()}, notebooks)
    for device, device_runs in sorted(every.items()):
        lines += ["", f"## {device}"]
        for k, title, body in KINDS:
            mine = [(name, result) for kk, name, result in device_runs if kk == k]
            if not mine:
                continue
            lines += ["", f"### {title}"]
            for name, result in mine:
                lines += heading(name, result) + [""] + body(result) + figures(name)
        lines += disagreements(device_runs)
    text = "\n".join(lines) + "\n"
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only say whether docs/benchmarks.md is up to date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if DOC.is_file() and DOC.read_text() == text:
            return 0
        print(f"{DOC.relative_to(ROOT)} is stale: run python -m bench.report", file=sys.stderr)
        return 1
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
