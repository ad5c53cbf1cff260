#!/usr/bin/env bash
# open_gate_on_relisten.sh SERVER_LOG GATE: creates the file GATE once uroce's server, logging at
# UROCE_LOG=info into SERVER_LOG, has said twice that an rdma_cm id of its listens — perftest -R's
# control connection and then its test connection. The client's second rdma_connect waits for
# GATE (connect_gate.c). Gives up after 120 s; run it in the background and kill it when done.
set -uo pipefail
log=$1 gate=$2
for _ in $(seq 2400); do
  listens=$(grep -c "rdma_cm: listening on" "$log" 2>/dev/null)
  if ((${listens:-0} >= 2)); then
    touch "$gate"
    exit 0
  fi
  sleep 0.05
done
exit 1
