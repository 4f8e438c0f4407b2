"""Cold-start results summarised: each exercise's runs gathered into a row, every bar's worst cold run set
against the bar and the margin it must keep, the table of a run, and one device's runs merged into one result.

bench/coldstart.py makes the runs; this module needs no GPU (its tests make runs up).
"""

from __future__ import annotations

import statistics

MARGIN = 1.2  # a bar at most the worst cold run / MARGIN
MAX_SPREAD = 1.15  # max / min of one figure over the runs on one GPU


def rows_of(results: dict, notebook_mode: bool) -> list[dict]:
    """One row per exercise (per solution with --exercises), its runs in order, summarised."""
    rows: dict = {}
    for key, runs in results.items():
        runs.sort(key=lambda run: run["round"])
        for run in runs:
            if not notebook_mode:
                rows.setdefault(key, {"exercise": run.get("exercise", key.split()[0]), "what": key, "runs": []})
                rows[key]["runs"].append(run)
                continue
            if not run.get("exercises"):  # the notebook crashed: every exercise of it lost this run
                rows.setdefault(f"{key}: crashed", {"exercise": key, "what": "the notebook", "runs": []})
                rows[f"{key}: crashed"]["runs"].append(run)
            for n, ex in enumerate(run.get("exercises", [])):
                rows.setdefault(ex["exercise"], {"exercise": ex["exercise"], "what": key, "runs": []})
                # the notebook's own figures ride with its first exercise: where its seconds went
                cells = {k: run[k] for k in ("cells_s", "slowest_cells") if k in run} if n == 0 else {}
                rows[ex["exercise"]]["runs"].append({"round": run["round"], "gpu": run["gpu"],
                                                     "notebook_s": run["seconds"], **cells, **ex,
                                                     **({"machine": run["machine"]} if "machine" in run else {})})
    for row in rows.values():
        row["summary"] = summarise(row["runs"])
    return list(rows.values())


INSTALLED = "installed"  # a run's "machine": bytecode and matplotlib's font list there (coldstart.installed)


def notebook_seconds(results_rows: list[dict]) -> dict:
    """{notebook: [seconds of each cold check]} from the rows of a notebook-mode run: of the checks on a machine
    as installed where a notebook has some (a bare one also compiled torch's bytecode and scanned the fonts)."""
    out: dict = {}
    for row in results_rows:
        for run in row["runs"]:
            if "notebook_s" in run:
                installed = run.get("machine") == INSTALLED
                out.setdefault(row["what"], {})[run["round"]] = (run["notebook_s"], installed)
    kept = {}
    for nb, d in out.items():
        installed = [v for _, (v, inst) in sorted(d.items()) if inst]
        kept[nb] = installed or [v for _, (v, _) in sorted(d.items())]
    return kept


def summarise(runs: list[dict]) -> dict:
    """Per bar: min, median, max, spread, the bar, the worst run's margin over it, the highest safe bar."""
    graded = [r for r in runs if r["status"] != "not graded on performance"]
    out = {"passed": sum(r["status"] == "passed" for r in graded), "runs": len(graded), "bars": {},
           "failed": sorted({f for r in runs for f in r.get("failed", [])})[:5]}
    names = sorted({k for r in runs for k in r.get("bars", {})})
    for name in names:
        values = [r["bars"][name][0] for r in runs if name in r.get("bars", {})]
        bar_value = next(r["bars"][name][1] for r in runs if name in r.get("bars", {}))
        lo, hi = min(values), max(values)
        out["bars"][name] = {
            "bar": bar_value, "min": lo, "median": statistics.median(values), "max": hi, "n": len(values),
            "spread": hi / lo if lo > 0 else float("inf"), "margin": lo / bar_value if bar_value else float("inf"),
            "safe_bar": int(lo / MARGIN * 100) / 100}
        out["bars"][name]["ok"] = out["bars"][name]["margin"] >= MARGIN and len(values) == len(graded)
    out["ok"] = (out["passed"] == out["runs"] and all(b["ok"] for b in out["bars"].values())
                 and not out["failed"])
    return out


def rescored(row: dict, bar_now) -> dict:
    """A row's summary scored against the bars of today's code: bar_now(exercise, bar name, the bar when measured)
    gives each bar now. A run counts as passed when every figure clears its bar now and no other criterion failed
    (a performance failure at the bar of its day is not one)."""
    s = row["summary"]
    now = {name: bar_now(row["exercise"], name, b["bar"]) for name, b in s["bars"].items()}
    passed = 0
    for run in row["runs"]:
        if run["status"] == "not graded on performance":
            continue
        others = [f for f in run.get("failed", []) if not f.startswith("performance:")]
        figures = run.get("bars", {})
        passed += not others and set(figures) == set(now) and all(figures[n][0] >= now[n] for n in now)
    bars = {}
    for name, b in s["bars"].items():
        margin = b["min"] / now[name] if now[name] else float("inf")
        bars[name] = {**b, "bar": now[name], "margin": margin, "ok": margin >= MARGIN and b["n"] == s["runs"]}
    failed = [f for f in s["failed"] if not f.startswith("performance:")]
    return {**s, "passed": passed, "bars": bars, "failed": failed,
            "ok": passed == s["runs"] and not failed and all(b["ok"] for b in bars.values())}


def table(result: dict) -> str:
    d = result["device"]
    lines = [f"Cold-start headroom: {d['name']} ({result['date']}, torch {result['torch']}, triton {result['triton']}), "
             f"{result['runs']} cold gradings per solution on {len(result['gpus'])} GPU(s)", "",
             "| exercise | bar | passed | min | median | max | spread | bar | margin | safe bar | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        s = row["summary"]
        if s["failed"]:
            lines.append(f"| {row['exercise']} | other criteria | | | | | | | | | FAILED: {s['failed'][0][:80]} |")
        if not s["bars"] and s["runs"]:
            why = next((r.get("message", "") for r in row["runs"] if r["status"] != "passed"), "")
            lines.append(f"| {row['exercise']} | - | {s['passed']}/{s['runs']} | | | | | | | | NOT OK: {why[:80]} |")
        for name, b in s["bars"].items():
            flag = "ok" if b["ok"] else "NOT OK"
            if b["spread"] > MAX_SPREAD:
                flag += ", spread"
            lines.append(f"| {row['exercise']} | {name} | {s['passed']}/{s['runs']} | {b['min']:.3f} | "
                         f"{b['median']:.3f} | {b['max']:.3f} | {b['spread']:.2f} | {b['bar']:.2f} | "
                         f"{b['margin']:.2f} | {b['safe_bar']:.2f} | {flag} |")
    seconds = notebook_seconds(result["rows"])
    if seconds:
        lines += ["", "| notebook | cold checks | seconds (min / median / max; as installed where measured so) |",
                  "|---|---|---|"]
        lines += [f"| {nb} | {len(v)} | {min(v):.0f} / {statistics.median(v):.0f} / {max(v):.0f} |"
                  for nb, v in sorted(seconds.items())]
    return "\n".join(lines) + "\n"


def merge(parts: list[dict], bar_now=None) -> dict:
    """One device's result from several runs of it (each call of a time-limited machine gives one): the runs of
    each exercise put together, rounds renumbered, every summary made again (against today's bars where bar_now
    gives them: see rescored)."""
    names = {part["device"]["name"] for part in parts}
    units = {part.get("unit", "notebook") for part in parts}
    if len(names) != 1 or len(units) != 1:
        raise SystemExit(f"--merge takes runs of one device and one unit; these are {sorted(names)}, {sorted(units)}")
    shared = {part.get("per_gpu", 1) for part in parts}
    if len(shared) != 1:
        raise SystemExit(f"--merge takes runs with the same gradings at once on a GPU; these have {sorted(shared)}"
                         " (a shared GPU's runs are not cold-start headroom)")
    rows: dict = {}
    offset = 0  # past every round of the parts before: a part may be a merge itself, its rounds in the thousands
    for part in parts:
        for row in part["rows"]:
            into = rows.setdefault((row["exercise"], row["what"]), {**row, "runs": []})
            into["runs"] += [{**run, "round": run["round"] + offset} for run in row["runs"]]
        last = max((run["round"] for row in part["rows"] for run in row["runs"]), default=0)
        offset += (last // 1000 + 1) * 1000
    for row in rows.values():
        row["runs"].sort(key=lambda run: run["round"])
        row["summary"] = summarise(row["runs"])
        if bar_now is not None:
            row["summary"] = rescored(row, bar_now)
    return {**parts[-1], "runs": max(len(r["runs"]) for r in rows.values()), "merged_from": len(parts),
            "gpus": sorted({g for part in parts for g in part["gpus"]}), "rows": list(rows.values())}
