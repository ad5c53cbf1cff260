#!/usr/bin/env bash
# Open MPI (Debian's 4.1) over uroce: NP ranks on one host, every one on the same uroce device
# (uroce0 on ADDRESS, shared by the ranks' processes as an RNIC is: docs/architecture.md, "One
# device, many processes"), with no per-rank wrapper, and `--mca pml ucx` — Debian's
# openmpi-mca-params.conf excludes pml ucx, so without the flag MPI runs over shared memory and
# never opens uroce (checked too). No /dev/infiniband node and no root: UCX finds the device
# through liburoce (discovery.cc).
#
#   mpi.sh UROCE_RUN MPI_PINGPONG ADDRESS NP
# Environment: TIMEOUT (seconds, default 60).
set -uo pipefail
run=$1 prog=$2 addr=$3 np=$4
command -v mpirun >/dev/null || { echo "SKIP: Open MPI is not installed (openmpi-bin)"; exit 77; }
[[ -e /dev/infiniband/uroce0 ]] && { echo "SKIP: /dev/infiniband/uroce0 exists here"; exit 77; }
log=$(mktemp -d /tmp/uroce-mpi.XXXXXX)
trap 'rm -rf "$log"' EXIT
mpi=(timeout "${TIMEOUT:-60}" mpirun --allow-run-as-root --oversubscribe -np "$np"
     -x "UROCE_DEVICES=uroce0=$addr" -x UCX_NET_DEVICES=uroce0:1 -x "UCX_TLS=self,rc_verbs,ud_verbs"
     -x UROCE_STATS=1)
fail=
"${mpi[@]}" --mca pml ucx "$run" "$prog" >"$log/ucx.out" 2>&1
rc=$?
cat "$log/ucx.out"
((rc != 0)) && fail="mpirun --mca pml ucx exited $rc"
[[ $(grep -cE "mpi_pingpong: rank [0-9]+ of $np .* 0 wrong" "$log/ucx.out") == "$np" ]] ||
  fail=${fail:-"not all $np ranks reported every byte right"}
# UROCE_STATS=1: each rank's device prints its counters when it closes.
[[ $(grep -cE "^ +sent_pkts +[1-9]" "$log/ucx.out") == "$np" ]] ||
  fail=${fail:-"not all $np ranks' uroce devices sent packets"}
# The check can fail: without the flag Debian's default keeps pml ucx out, and uroce is unused.
"${mpi[@]}" "$run" "$prog" >"$log/default.out" 2>&1
echo "--- without --mca pml ucx:"
cat "$log/default.out"
grep -qE "^ +sent_pkts" "$log/default.out" &&
  fail=${fail:-"uroce carried traffic without --mca pml ucx: Debian's default changed?"}
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
