"""Command line: python -m autograder {device, list, check, grade-class}."""

from __future__ import annotations

import argparse
import json
import re
import sys

# A Slurm memory size: a number and its unit (M, G or T, powers of 1024 as Slurm reads them).
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([MGT])(?:i?B)?\s*", re.IGNORECASE)


def memory_gb(text: str) -> float:
    """--slurm-mem's value in GB, as submitit takes it: "16G" -> 16.0, "512M" -> 0.5, "1T" -> 1024.0."""
    m = _SIZE.fullmatch(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"a memory size with its unit, such as 16G or 512M (M, G or T), not {text!r}")
    gb = float(m[1]) * {"M": 1 / 1024, "G": 1, "T": 1024}[m[2].upper()]
    if gb * 1024 < 1:
        raise argparse.ArgumentTypeError(f"at least 1M of memory a job, not {text!r}")
    return gb


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {value}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="The kernel fusion course's grader.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_dev = sub.add_parser("device", help="print this machine's device profile (measured peaks)")
    p_dev.add_argument("--refresh", action="store_true", help="measure again instead of using the cache")
    p_list = sub.add_parser("list", help="list the exercises")
    p_list.add_argument("--json", action="store_true")
    p_check = sub.add_parser("check", help="run notebooks without Jupyter and grade their exercises")
    p_check.add_argument("notebooks", nargs="+", metavar="NOTEBOOK.ipynb")
    p_check.add_argument("--json", action="store_true", help="print the results as JSON")
    p_check.add_argument("--timeout", type=float, default=None, help="seconds per notebook (default 1800)")
    p_check.add_argument("--criteria", default=None, help="comma-separated criteria to grade (default: all)")
    p_check.add_argument("--quiet", action="store_true", help="do not echo the notebook's output")
    p_check.add_argument("--only", action="append", default=None, metavar="ID[,ID...]",
                         help="grade only these exercises (e.g. 02.rmsnorm); repeat or separate with commas")
    p_class = sub.add_parser("grade-class", help="nbgrader autograde for every student, each in its own process")
    p_class.add_argument("assignment")
    p_class.add_argument("--timeout", type=float, default=3600, help="seconds per student (default 3600)")
    p_class.add_argument("--force", action="store_true", help="grade again students graded before")
    p_class.add_argument("--csv", default=None,
                         help="where to write the grades (default grading/grades-ASSIGNMENT.csv at the course root)")
    p_class.add_argument("--similarity-threshold", type=float, default=0.8, metavar="SHARE",
                         help="flag two answers sharing at least this share of their fingerprints (default 0.8)")
    p_class.add_argument("--anonymous", action="store_true",
                         help="also write the leaderboard with stable pseudonyms instead of names, to show the class")
    p_class.add_argument("--allow-public-seed", action="store_true",
                         help="grade with the package's public secret seed (practice runs; refused otherwise)")
    p_class.add_argument("--db", default=None, help="nbgrader database URL (default gradebook.db here)")
    where = p_class.add_argument_group("where students are graded (default: one at a time on this machine)")
    where.add_argument("--gpus", default=None, metavar="all|0,1,...",
                       help="one student per GPU at a time, each process seeing only its GPU")
    where.add_argument("--workers", type=int, default=None, metavar="N",
                       help="N students at once on the CPU (Triton's interpreter: performance not measured)")
    where.add_argument("--cluster", choices=("slurm", "local", "debug"), default=None,
                       help="one submitit job per student: a Slurm task with one GPU (run this on a login node; "
                            "the course folder must be on storage the nodes share), or submitit's local processes")
    where.add_argument("--slurm-partition", default=None, help="Slurm partition for the jobs")
    where.add_argument("--slurm-time", type=int, default=60, metavar="MIN", help="time limit of a job (default 60)")
    where.add_argument("--slurm-account", default=None, help="Slurm account to charge")
    where.add_argument("--slurm-parallel", type=int, default=None, metavar="N",
                       help="at most N students' jobs running at once")
    where.add_argument("--slurm-gpus", type=int, default=1, metavar="N", help="GPUs per job (default 1)")
    where.add_argument("--slurm-cpus", type=positive_int, default=4, metavar="N", help="CPUs per job (default 4)")
    where.add_argument("--slurm-mem", type=memory_gb, default="32G", metavar="SIZE",
                       help="memory per job, with its unit: 16G, 512M, 1T (default 32G)")
    where.add_argument("--slurm-setup", action="append", default=None, metavar="COMMAND",
                       help="a shell line each job runs first (e.g. 'module load cuda'); repeat for more")
    args = parser.parse_args(argv)

    if args.command == "grade-class":
        from pathlib import Path

        from autograder.classroom.grade_class import GradingStopped, grade_class

        try:
            options = dict(partition=args.slurm_partition, time_min=args.slurm_time, account=args.slurm_account,
                           parallel=args.slurm_parallel, gpus_per_task=args.slurm_gpus, setup=args.slurm_setup,
                           cpus_per_task=args.slurm_cpus, mem_gb=args.slurm_mem)
            grade_class(Path.cwd(), args.assignment, timeout=args.timeout, force=args.force,
                               csv_path=args.csv, db_url=args.db, echo=lambda m: print(m, flush=True),
                               gpus=args.gpus, workers=args.workers, cluster=args.cluster,
                               cluster_options=options if args.cluster else None,
                               similarity_threshold=args.similarity_threshold, anonymous=args.anonymous,
                               allow_public_seed=args.allow_public_seed)
        except (FileNotFoundError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except GradingStopped as e:
            print(f"error: {e}", file=sys.stderr)
            return 3
        return 0  # every student is recorded (the summary line counts the crashed, timed out...)

    import autograder
    from autograder.checker import notebook as checker

    if args.command == "device":
        from autograder.measure import capability

        print(autograder.device_profile(refresh=args.refresh).describe())
        print("\n".join(capability.describe(capability.current())))
        return 0
    if args.command == "list":
        exs = [ex.describe() for ex in autograder.exercises()]
        if args.json:
            print(json.dumps(exs, indent=1))
        else:
            for e in exs:
                print(f"{e['id']:<20} {e['notebook']:<20} {e['signature']}\n{'':<20} criteria: {', '.join(e['criteria'])}")
        return 0
    criteria = args.criteria.split(",") if args.criteria else None
    if criteria:
        from autograder.specs.exercise import CRITERIA

        unknown = [c for c in criteria if c not in CRITERIA]
        if unknown:
            print(f"unknown criteria {unknown}; the criteria are {', '.join(CRITERIA)}", file=sys.stderr)
            return 2
    try:
        paths = [checker.validate_path(p) for p in args.notebooks]
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    only = [i.strip() for arg in args.only or () for i in arg.split(",") if i.strip()] or None
    if only:
        held = {p: [ex.id for ex in checker.notebook_exercises(p)] for p in paths}
        unknown = [i for i in only if not any(i in ids for ids in held.values())]
        if unknown:
            listing = "; ".join(f"{p.name}: {', '.join(ids)}" for p, ids in held.items())
            print(f"error: no exercise {', '.join(unknown)} in the notebook(s) given; their exercises are {listing}",
                  file=sys.stderr)
            return 2
        paths = [p for p in paths if any(i in held[p] for i in only)]
    results = []
    for p in paths:
        echo = None if (args.quiet or args.json) else (lambda line: print("  | " + line, flush=True))
        print(f"checking {p} ...", file=sys.stderr if args.json else sys.stdout, flush=True)
        results.append(checker.run(p, timeout=args.timeout or checker.DEFAULT_TIMEOUT, criteria=criteria, echo=echo,
                                   only=only))
    if args.json:
        print(json.dumps([checker.to_json(r) for r in results], indent=1, default=str))
    else:
        for r in results:
            print(checker.render(r))
    return 0 if all(checker.passed(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
