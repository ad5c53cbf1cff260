#!/usr/bin/env bash
# fio's rdma engine with verb=send, the matrix of issue 32: server iodepth 16, 32 and 64, blocks of
# 4 KiB and 64 KiB, each RUNS times (default 20), the server and the client on two addresses.
# Prints each case's passes out of its runs, and why each failed run failed.
#
#   bench/fio_send.sh [BUILD_DIR] [RUNS]
#
# fio connects with rnr_retry_count 0: one SEND that finds no receive posted and gets an RNR NAK
# fails the run. The client keeps half the server's depth in flight, but that does not bound what
# the server's device takes in: the device ACKs a SEND when it places it, and the client sends
# on. A server thread off its core while the client streams lets the engine consume every posted
# receive; the next SEND then waits for a receive for up to UROCE_RNR_GRACE (10 ms; uroce's
# rdma_cm sets min_rnr_timer to 10.24 ms) before the RNR NAK (docs/configuration.md). Under load
# a server can be off its core for longer, which is why this is a benchmark and not a CI test
# (docs/performance.md, "fio verb=send"). UROCE_RNR_GRACE=0 shows the run without the grace.
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
  idx=$((idx + 1))
  pass=0 failed=""
  for r in $(seq "$runs"); do
    out=$(TIMEOUT=60 "$root/tests/integration/fio.sh" "$run" 127.0.72.$idx 127.0.73.$idx \
            $((19700 + idx)) "$bs" "$sd" "$cd" "$size" 2>&1)
    if grep -q "^PASS" <<<"$out"; then
      pass=$((pass + 1))
    else
      failed+=" run$r:$(grep -o "RNR retry counter exceeded\|exit [0-9]*" <<<"$out" | head -1 | tr ' ' _)"
    fi
  done
  printf "bs=%-4s server_iodepth=%-3s client_iodepth=%-3s %2d/%d%s\n" "$bs" "$sd" "$cd" "$pass" \
    "$runs" "$failed"
done
