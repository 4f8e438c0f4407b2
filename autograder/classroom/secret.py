"""Give a course a secret seed of its own (what `make course` runs; grade-class does it too on its first run).

    python -m autograder.classroom.secret [GRADING_FILE]

Writes .grading-secret.toml beside GRADING_FILE (default: $FUSION_COURSE_GRADING, else ./grading.toml) with a
random seed, readable by its owner only, unless it is there already: a course keeps its seed from run to run.
"""

from __future__ import annotations

import os
import sys

from autograder.config import ENV_VAR, ensure_secret


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        path, written = ensure_secret(argv[0] if argv else os.environ.get(ENV_VAR) or "grading.toml")
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{'wrote a random secret seed to' if written else 'the course keeps its secret seed in'} {path} "
          "(git-ignored: never commit it or hand it out)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
