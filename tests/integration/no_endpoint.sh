#!/usr/bin/env bash
# Unmodified rdma_cm clients pointed at an address where nothing listens on UDP 4791: the host
# answers the REQ with ICMP port unreachable, and uroce says so at once — the program gets
# RDMA_CM_EVENT_UNREACHABLE with -ECONNREFUSED (a timeout, after the REQ's retries, gives -110),
# rdma_connect fails with "Connection refused", the log names the address at the default level,
# and UROCE_STATS=1 counts rx_icmp_unreachable. Nothing here is timed: a run that waited out the
# retries prints the timeout's status and fails.
#
#   no_endpoint.sh UROCE_RUN DEVICE_IP NOBODY_IP PORT
set -uo pipefail
run=$1 dev_ip=$2 nobody=$3 port=$4
export UROCE_DEVICES=uroce0=$dev_ip UROCE_STATS=1
unset UROCE_LOG  # the default level
fail=
check() {  # check NAME OUTPUT TEXT…: each TEXT must be in OUTPUT
  local name=$1 out=$2
  shift 2
  for want in "$@"; do
    if ! grep -qF -- "$want" <<<"$out"; then
      echo "FAIL: $name did not print: $want"
      fail=1
    fi
  done
}

out=$(timeout 60 "$run" rping -c -v -a "$nobody" -p "$port" -C 1 2>&1)
rc=$?
echo "--- rping (exit $rc)"
echo "$out"
[[ $rc -ne 0 && $rc -ne 124 ]] || { echo "FAIL: rping exited $rc"; fail=1; }
check rping "$out" "RDMA_CM_EVENT_UNREACHABLE, error -111" \
  "no RoCE endpoint at $nobody:4791 (ICMP port unreachable)" "rx_icmp_unreachable"

out=$(timeout 60 "$run" rdma_client -s "$nobody" -p "$port" 2>&1)
rc=$?
echo "--- rdma_client (exit $rc)"
echo "$out"
check rdma_client "$out" "rdma_connect: Connection refused" \
  "no RoCE endpoint at $nobody:4791 (ICMP port unreachable)"

if [[ -z $fail ]]; then echo PASS; else exit 1; fi
