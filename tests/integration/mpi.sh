#!/usr/bin/env bash
# MPI over uroce: NP ranks on one host, every one on the same uroce device (uroce0 on ADDRESS,
# shared by the ranks' processes as an RNIC is: docs/architecture.md, "One device, many
# processes"), with no per-rank wrapper, through UCX. No /dev/infiniband node and no root: UCX
# finds the device through liburoce (discovery.cc).
#   openmpi  Debian's Open MPI 4.1 with `--mca pml ucx` — Debian's openmpi-mca-params.conf
#            excludes pml ucx, so without the flag MPI runs over shared memory and never opens
#            uroce (checked too);
#   mpich    Debian's MPICH 4.0, built ch4:ucx: UCX carries every message, on-node ones too, with
#            no flag at all.
# Each is started by its own launcher (mpirun.openmpi, mpirun.mpich), whichever the `mpirun`
# alternative names.
#
#   mpi.sh UROCE_RUN MPI_PINGPONG ADDRESS NP [openmpi|mpich]
# Environment: TIMEOUT (seconds, default 60).
set -uo pipefail
run=$1 prog=$2 addr=$3 np=$4 impl=${5:-openmpi}
[[ -e /dev/infiniband/uroce0 ]] && { echo "SKIP: /dev/infiniband/uroce0 exists here"; exit 77; }
log=$(mktemp -d /tmp/uroce-mpi.XXXXXX)
trap 'rm -rf "$log"' EXIT
env=("UROCE_DEVICES=uroce0=$addr" UCX_NET_DEVICES=uroce0:1 "UCX_TLS=self,rc_verbs,ud_verbs"
     UROCE_STATS=1)
case $impl in
  openmpi)
    launcher=$(command -v mpirun.openmpi || command -v mpirun) ||
      { echo "SKIP: Open MPI is not installed (openmpi-bin)"; exit 77; }
    mpi=(timeout "${TIMEOUT:-60}" "$launcher" --allow-run-as-root --oversubscribe -np "$np")
    for e in "${env[@]}"; do mpi+=(-x "$e"); done
    with_uroce=(--mca pml ucx) ;;
  mpich)
    launcher=$(command -v mpirun.mpich) || { echo "SKIP: MPICH is not installed (mpich)"; exit 77; }
    mpi=(timeout "${TIMEOUT:-60}" "$launcher" -n "$np")
    for e in "${env[@]}"; do mpi+=(-genv "${e%%=*}" "${e#*=}"); done
    with_uroce=() ;;
  *)
    echo "mpi.sh: unknown MPI '$impl'" >&2
    exit 2 ;;
esac
fail=
"${mpi[@]}" "${with_uroce[@]}" "$run" "$prog" >"$log/ucx.out" 2>&1
rc=$?
cat "$log/ucx.out"
((rc != 0)) && fail="$(basename "$launcher") ${with_uroce[*]} exited $rc"
[[ $(grep -cE "mpi_pingpong: rank [0-9]+ of $np .* 0 wrong" "$log/ucx.out") == "$np" ]] ||
  fail=${fail:-"not all $np ranks reported every byte right"}
# UROCE_STATS=1: each rank's device prints its counters when it closes.
[[ $(grep -cE "^ +sent_pkts +[1-9]" "$log/ucx.out") == "$np" ]] ||
  fail=${fail:-"not all $np ranks' uroce devices sent packets"}
if [[ $impl == openmpi ]]; then
  # The check can fail: without the flag Debian's default keeps pml ucx out, and uroce is unused.
  "${mpi[@]}" "$run" "$prog" >"$log/default.out" 2>&1
  echo "--- without --mca pml ucx:"
  cat "$log/default.out"
  grep -qE "^ +sent_pkts" "$log/default.out" &&
    fail=${fail:-"uroce carried traffic without --mca pml ucx: Debian's default changed?"}
fi
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
