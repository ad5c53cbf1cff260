#!/usr/bin/env bash
# fio's rdma engine with verb=send, the matrix of issue 32: server iodepth 16, 32 and 64, blocks of
# 4 KiB and 64 KiB, each RUNS times (default 20), on two addresses and on one shared device.
# Prints each case's passes out of its runs, and the RNR NAKs of the failed runs.
#
#   bench/fio_send.sh [BUILD_DIR] [RUNS]
#
# fio connects with rnr_retry_count 0: one SEND that finds no receive posted fails the run. The
# client keeps half the server's depth in flight, but that does not bound what the server's
# device takes in: the device ACKs a SEND when it places it, and the client sends on. A server
# thread that is off its core longer than uroce's handoff (1 ms) while the client streams lets
# the engine consume every posted receive, and the next SEND gets an RNR NAK — as an RNIC would
# give an application that slow. On an idle machine the server keeps up; under load (a ctest
# -j2 beside it) it does not, which is why this is a benchmark and not a CI test
# (docs/performance.md, "fio verb=send").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
runs=${2:-20}
run=$build/bin/uroce-run
[[ -x $run ]] || { echo "no $run: build first (scripts/build.sh)" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio is not installed (scripts/install-deps.sh)" >&2; exit 1; }

idx=0
for case in "4k 16 8 16m" "4k 32 16 16m" "4k 64 32 16m" "64k 16 8 64m" "64k 32 16 64m" \
            "64k 64 32 64m"; do
  read -r bs sd cd size <<<"$case"
  for where in two shared; do
    idx=$((idx + 1))
    srv=127.0.72.$idx cli=127.0.73.$idx
    [[ $where == shared ]] && cli=$srv
    pass=0 rnr=""
    for r in $(seq "$runs"); do
      out=$(TIMEOUT=60 "$root/tests/integration/fio.sh" "$run" "$srv" "$cli" $((19700 + idx)) \
              "$bs" "$sd" "$cd" "$size" 2>&1)
      if grep -q "^PASS" <<<"$out"; then
        pass=$((pass + 1))
      else
        rnr+=" run$r:$(grep -o "sent [0-9]* RNR NAKs\|exit [0-9]*" <<<"$out" | head -1 | tr ' ' _)"
      fi
    done
    printf "bs=%-4s server_iodepth=%-3s client_iodepth=%-3s %-7s %2d/%d%s\n" "$bs" "$sd" "$cd" \
      "$where" "$pass" "$runs" "$rnr"
  done
done
