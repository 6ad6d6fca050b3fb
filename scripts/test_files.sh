#!/usr/bin/env bash
# Run test files one process each (default: every tests/test_*.py; or the
# files in $RAGSYNC_TEST_FILES, space-separated), $RAGSYNC_TEST_JOBS at a time
# (default: 2 on a machine with two or more cores, else 1): one progress line per file
# (file k of N ended, elapsed time), the tests that took 15 s or more, the running
# totals of tests after it, a grand total line and the ten slowest files. Exit 1 when any file failed (the failed files named).
set -euo pipefail
cd "$(dirname "$0")/.."
# Every test file in a process of its own: files are independent, and a
# process that earlier files left full of threads (gRPC channels, servers) and
# memory is not what a user's run looks like. Each file's line says where the
# run is (file k of N, elapsed time) and the running totals of tests.
files=(${RAGSYNC_TEST_FILES:-tests/test_*.py})
# The slowest files (the last full run's "slowest files" line) start first, so
# that with two jobs the run does not end on one long file while the other
# job idles. Only the order changes; every file still runs.
slow_first=(tests/test_interleavings_property.py tests/test_cluster.py tests/test_signals.py
  tests/test_sync.py tests/test_sync_redmine.py tests/test_copies.py tests/test_stream_crash_property.py tests/test_streaming.py
  tests/test_readme_walkthroughs.py tests/test_backfill.py tests/test_correctness.py)
if [ -z "${RAGSYNC_TEST_FILES:-}" ]; then
  ordered=()
  for f in "${slow_first[@]}"; do [ -e "$f" ] && ordered+=("$f"); done
  for f in "${files[@]}"; do [[ " ${slow_first[*]} " == *" $f "* ]] || ordered+=("$f"); done
  files=("${ordered[@]}")
fi
total=${#files[@]}
failed=()
passed_n=0 failed_n=0 skipped_n=0 k=0
start=$SECONDS
count() {  # count WORD LINE: the number before WORD in pytest's summary line (0 when absent)
  local n
  n=$(grep -oE "[0-9]+ $1" <<<"$2" | head -1 | cut -d' ' -f1)
  echo "${n:-0}"
}
durations=()  # "SECONDS FILE" per file, for the slowest-files line
# Files run $RAGSYNC_TEST_JOBS at a time. The default is two on a machine with
# two or more cores (what CI runs: 18m32s against 33m12s one at a time on 2
# cores, benchmarks/README.md), else one; RAGSYNC_TEST_JOBS=1 runs them one after
# another. More than two gains little: the slow files are CPU-bound. Each file's
# output is printed, with its line, when it ends; "k of N" counts the files ended so far.
# (nproc without the OpenMP limits scripts/test.sh sets: GNU nproc honours them)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)
jobs_max=${RAGSYNC_TEST_JOBS:-$((cores >= 2 ? 2 : 1))}
echo "== $total test files, $jobs_max at a time (RAGSYNC_TEST_JOBS=1: one after another)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
launch() {  # launch INDEX: run that file's tests in the background; INDEX.rc appears when it ends
  local i=$1
  (
    t0=$SECONDS
    set +e
    .venv/bin/python -m pytest -q -p no:cacheprovider --durations=3 --durations-min=15 "${files[$i]}" >"$work/$i.out" 2>&1
    rc=$?
    echo $((SECONDS - t0)) >"$work/$i.secs"
    echo "$rc" >"$work/$i.rc.tmp" && mv "$work/$i.rc.tmp" "$work/$i.rc"
  ) &
}
report() {  # report INDEX: print an ended file's line, output and the running totals
  local i=$1 f=${files[$1]} rc summary
  k=$((k + 1))
  echo "== [$k/$total] $f (elapsed $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s)"
  # pytest's "slowest durations" block, only when a test took 15 s or more
  awk '/^=+ slowest [0-9]+ durations =+$/ { head = $0; next }
       head != "" && /^$/ { next }
       head != "" && /^[0-9.]+s (setup|call|teardown) / { print head; head = ""; shown = 1 }
       head != "" { head = "" }
       shown && /^[0-9.]+s (setup|call|teardown) / { print; next }
       /durations < [0-9.]+s hidden/ { next }
       { shown = 0; print }' "$work/$i.out"
  summary=$(tail -1 "$work/$i.out")
  rc=$(cat "$work/$i.rc")
  passed_n=$((passed_n + $(count passed "$summary")))
  failed_n=$((failed_n + $(count failed "$summary") + $(count error "$summary")))
  skipped_n=$((skipped_n + $(count skipped "$summary")))
  # 5: nothing collected (every test skipped or deselected) is not a failure.
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then failed+=("$f"); fi
  echo "   so far: $passed_n passed, $failed_n failed, $skipped_n skipped; ${#failed[@]} of $k files failed"
  durations+=("$(cat "$work/$i.secs") $f")
}
next=0
running=()  # indices of the files running now
while [ "$next" -lt "$total" ] || [ ${#running[@]} -gt 0 ]; do
  while [ ${#running[@]} -lt "$jobs_max" ] && [ "$next" -lt "$total" ]; do
    launch "$next"
    running+=("$next")
    next=$((next + 1))
  done
  sleep 0.2
  still=()
  for i in "${running[@]}"; do
    if [ -e "$work/$i.rc" ]; then report "$i"; else still+=("$i"); fi
  done
  running=("${still[@]}")
done
wait
elapsed="$(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s"
echo "TOTAL: $total files in $elapsed: $passed_n passed, $failed_n failed, $skipped_n skipped"
# The ten slowest files (where cutting the suite's time pays most).
slowest=$(printf '%s\n' "${durations[@]}" | sort -rn -k1,1 | head -10 | awk '{printf "%s%ss %s", (NR > 1 ? ", " : ""), $1, $2}')
echo "slowest files: $slowest"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED test files: ${failed[*]}" >&2
  exit 1
fi
echo "all test files passed"
