#!/usr/bin/env bash
# fio's rdma engine, unmodified, over uroce's rdma_cm: the client streams SENDs (verb=send), the
# server's thread receives them and reposts each receive buffer. fio connects with
# rnr_retry_count 0, so a single RNR NAK fails the run ("RNR retry counter exceeded"): this is
# the test that a receive post never waits behind uroce's engine
# (docs/architecture.md, "Receive queues"). The client keeps at most CLIENT_IODEPTH messages in
# flight, fewer than the server has posted; a server thread kept off its core for milliseconds
# can still fall behind (bench/fio_send.sh says how).
#
#   fio.sh UROCE_RUN SERVER_IP CLIENT_IP PORT BS SERVER_IODEPTH CLIENT_IODEPTH SIZE
# Run by bench/fio_send.sh (not by ctest: it needs a server thread that keeps up, see there).
# With VERB=write or VERB=read the client moves the data with RDMA WRITEs or READs instead, which
# need no receive on the server (ctest's shared.fio: server and client on one shared device).
# SERVER_IP may equal CLIENT_IP: both processes then share the device.
# Environment: VERB (send, write or read; default send), FAULTS, TIMEOUT (lib.sh).
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 srv_ip=$2 cli_ip=$3 port=$4 bs=$5 srv_depth=$6 cli_depth=$7 size=$8

command -v fio >/dev/null || { echo "SKIP: fio is not installed (scripts/install-deps.sh)"; exit 77; }
((cli_depth < srv_depth)) || { echo "fio.sh: CLIENT_IODEPTH must be below SERVER_IODEPTH" >&2; exit 2; }

# The server says when its rdma_cm id listens (UROCE_LOG=info); the client starts then.
export UROCE_LOG=info
# fio runs each job in a process of its own, which outlives its parent when the parent is
# killed; a job left waiting for a peer would keep the device's address: none may stay.
cleanup_jobs() { pkill -9 -f -- "--port=$port --hostname=$srv_ip" 2>/dev/null; }
cleanup_jobs
trap 'cleanup_jobs; _pair_cleanup' EXIT
READY="rdma_cm: listening on"
common=(--ioengine=rdma --verb="${VERB:-send}" --bs="$bs" --size="$size" --port="$port" --hostname="$srv_ip")
server_cmd=("$run" fio --name=server "${common[@]}" --rw=read --iodepth="$srv_depth")
client_cmd=("$run" fio --name=client "${common[@]}" --rw=write --iodepth="$cli_depth")
run_pair "$srv_ip" "$cli_ip" "$port"

fail=
((srv_rc == 0)) || fail+="server exit $srv_rc; "
((cli_rc == 0)) || fail+="client exit $cli_rc; "
# fio's job line: "err= 0" when the job completed without an I/O error.
grep -q "err= 0" "$log/server.out" || fail+="server job reported an error; "
grep -q "err= 0" "$log/client.out" || fail+="client job reported an error; "
grep -q "WRITE: bw=" "$log/client.out" || fail+="client printed no bandwidth; "
# An RNR NAK fails the client's SEND (rnr_retry_count 0): fio reports the completion status.
grep -q "RNR retry counter exceeded" "$log/client.out" && fail+="RNR retry counter exceeded; "
verdict "$fail"
