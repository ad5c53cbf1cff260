#!/usr/bin/env bash
# Open MPI (Debian's 4.1) over uroce: two ranks on one host, each with a uroce device of its own
# (uroce0 on BASE.1 for rank 0, BASE.2 for rank 1: until a device can be shared between processes
# each needs its own address), with `--mca pml ucx` — Debian's openmpi-mca-params.conf excludes pml
# ucx, so without the flag MPI runs over shared memory and never opens uroce (checked too). No
# /dev/infiniband node and no root: UCX finds the devices through liburoce (discovery.cc).
#
#   mpi.sh UROCE_RUN MPI_PINGPONG BASE      e.g. BASE=127.0.66
# Environment: TIMEOUT (seconds, default 60).
set -uo pipefail
run=$1 prog=$2 base=$3
command -v mpirun >/dev/null || { echo "SKIP: Open MPI is not installed (openmpi-bin)"; exit 77; }
[[ -e /dev/infiniband/uroce0 ]] && { echo "SKIP: /dev/infiniband/uroce0 exists here"; exit 77; }
log=$(mktemp -d /tmp/uroce-mpi.XXXXXX)
trap 'rm -rf "$log"' EXIT
# Each rank picks its device's address from its rank number, then runs under uroce-run.
cat >"$log/rank.sh" <<RANK
#!/bin/sh
export UROCE_DEVICES=uroce0=$base.\$((OMPI_COMM_WORLD_RANK + 1))
exec "$run" "\$@"
RANK
chmod +x "$log/rank.sh"
mpi=(timeout "${TIMEOUT:-60}" mpirun --allow-run-as-root --oversubscribe -np 2
     -x UCX_NET_DEVICES=uroce0:1 -x UCX_TLS=self,rc_verbs,ud_verbs -x UROCE_STATS=1)
fail=
"${mpi[@]}" --mca pml ucx "$log/rank.sh" "$prog" >"$log/ucx.out" 2>&1
rc=$?
cat "$log/ucx.out"
((rc != 0)) && fail="mpirun --mca pml ucx exited $rc"
[[ $(grep -c "mpi_pingpong: rank [01]: .* 0 wrong" "$log/ucx.out") == 2 ]] ||
  fail=${fail:-"not both ranks reported every word right"}
# UROCE_STATS=1: each rank's device prints its counters when it closes.
[[ $(grep -cE "^ +sent_pkts +[1-9]" "$log/ucx.out") == 2 ]] ||
  fail=${fail:-"not both ranks' uroce devices sent packets"}
# The check can fail: without the flag Debian's default keeps pml ucx out, and uroce is unused.
"${mpi[@]}" "$log/rank.sh" "$prog" >"$log/default.out" 2>&1
echo "--- without --mca pml ucx:"
cat "$log/default.out"
grep -qE "^ +sent_pkts" "$log/default.out" &&
  fail=${fail:-"uroce carried traffic without --mca pml ucx: Debian's default changed?"}
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
