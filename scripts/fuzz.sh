#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, docs/hardening.md) with clang, ASan and UBSan in
# their own build tree and runs them, one after the other.
#   scripts/fuzz.sh [--runs N | --seconds N] [--jobs N] [--build DIR] [--seeds] [HARNESS…]
#     --runs N     executions per harness (default 10000000: the figure docs/hardening.md reports)
#     --seconds N  run each harness N seconds instead (CI: scripts/test.sh runs a short pass)
#     --build DIR  the fuzzing build tree (default build-fuzz)
#     --seeds      rewrite tests/fuzz/corpus/HARNESS from each harness's own seed writer, then stop
#     HARNESS      rx modify_qp datapath post_wr frames config (default: all)
# Each harness starts from its committed seeds (tests/fuzz/corpus/HARNESS) and keeps what it
# learns in DIR/corpus/HARNESS. A finding (crash, sanitizer report, leak, broken invariant) leaves
# its input in DIR/findings/ and makes the script fail; reproduce with DIR/bin/fuzz_HARNESS FILE.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=10000000
seconds=
build=$root/build-fuzz
seeds=0
harnesses=()
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --seeds) seeds=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
((${#harnesses[@]})) || harnesses=(rx modify_qp datapath post_wr frames config)

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUROCE_FUZZ=ON -DUROCE_WERROR=ON -DUROCE_BUILD_BENCH=OFF >/dev/null
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

if ((seeds)); then
  for h in "${harnesses[@]}"; do
    rm -rf "$root/tests/fuzz/corpus/$h"
    mkdir -p "$root/tests/fuzz/corpus/$h"
    UROCE_FUZZ_WRITE_SEEDS="$root/tests/fuzz/corpus/$h" "$build/bin/fuzz_$h"
    echo "fuzz.sh: $h: $(ls "$root/tests/fuzz/corpus/$h" | wc -l) seeds"
  done
  exit 0
fi

mkdir -p "$build/findings"
passed=0 failed=0
for h in "${harnesses[@]}"; do
  corpus=$build/corpus/$h
  mkdir -p "$corpus"
  log=$build/fuzz_$h.log
  limit=(-runs="$runs")
  [[ -n $seconds ]] && limit=(-max_total_time="$seconds")
  start=$(date +%s)
  # -rss_limit_mb: a harness whose memory grows without bound is a finding too.
  if "$build/bin/fuzz_$h" "${limit[@]}" -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/findings/$h-" "$corpus" "$root/tests/fuzz/corpus/$h" >"$log" 2>&1; then
    passed=$((passed + 1)); verdict=ok
  else
    failed=$((failed + 1)); verdict=FAILED
  fi
  end=$(date +%s)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf 'fuzz.sh: %-10s %s: %s executions in %ss (%s/s), coverage %s edges, peak RSS %s MB\n' \
    "$h" "$verdict" "${execs:-?}" "$((end - start))" "${rate:-?}" "${cov:-?}" "${rss:-?}"
  if [[ $verdict == FAILED ]]; then
    grep -E 'ERROR|runtime error|invariant|SUMMARY|Test unit written' "$log" | head -20 >&2 || true
  fi
done
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
