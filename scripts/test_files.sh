#!/usr/bin/env bash
# Run test files one process each (default: every tests/test_*.py; or the
# files in $RAGSYNC_TEST_FILES, space-separated): one progress line per file
# (file k of N, elapsed time), the running totals of tests after it, a
# grand total line and the ten slowest files. Exit 1 when any file failed (the failed files named).
set -euo pipefail
cd "$(dirname "$0")/.."
# Every test file in a process of its own: files are independent, and a
# process that earlier files left full of threads (gRPC channels, servers) and
# memory is not what a user's run looks like. Each file's line says where the
# run is (file k of N, elapsed time) and the running totals of tests.
files=(${RAGSYNC_TEST_FILES:-tests/test_*.py})
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
for f in "${files[@]}"; do
  k=$((k + 1))
  file_start=$SECONDS
  echo "== [$k/$total] $f (elapsed $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s)"
  out=$(mktemp)
  set +e
  .venv/bin/python -m pytest -q -p no:cacheprovider "$f" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  set -e
  summary=$(tail -1 "$out")
  rm -f "$out"
  passed_n=$((passed_n + $(count passed "$summary")))
  failed_n=$((failed_n + $(count failed "$summary") + $(count error "$summary")))
  skipped_n=$((skipped_n + $(count skipped "$summary")))
  # 5: nothing collected (every test skipped or deselected) is not a failure.
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then failed+=("$f"); fi
  echo "   so far: $passed_n passed, $failed_n failed, $skipped_n skipped; ${#failed[@]} of $k files failed"
  durations+=("$((SECONDS - file_start)) $f")
done
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
