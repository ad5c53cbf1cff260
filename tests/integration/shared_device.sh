#!/usr/bin/env bash
# One uroce device shared by many unmodified processes on one address (docs/architecture.md, "One
# device, many processes"):
#   shared_device.sh UROCE_RUN IP PORT many     4 ibv_rc_pingpong pairs started one after another,
#                                               every server and client on uroce0=IP, data checked
#                                               (-c), while a ninth process holds the device: no
#                                               QPN is handed out twice while the device lives
#   shared_device.sh UROCE_RUN IP PORT listen   two rping servers on two ports of IP; a third on the
#                                               first's port gets EADDRINUSE; a client reaches each
#   shared_device.sh UROCE_RUN IP PORT kill     a pingpong pair runs while a third process that
#                                               opened the device is killed (SIGKILL); a fourth
#                                               opens it afterwards and a new pair runs; no QPN of
#                                               the dead process comes back
#   shared_device.sh UROCE_RUN IP PORT churn    for CHURN_SECONDS (default 20): a long-lived
#                                               fio pair streams RDMA WRITEs and data-checked
#                                               pingpong pairs run one after another, while 7 other
#                                               processes open the device, run traffic and exit,
#                                               some killed (SIGKILL) mid-run; every long-lived
#                                               and unkilled run succeeds, and no QPN is handed
#                                               out twice
#   shared_device.sh UROCE_RUN IP PORT mcast    two mckey receivers and a sender, all on
#                                               uroce0=IP, one multicast group (239.90.PORT/256.
#                                               PORT%256): each receiver gets every message
#   shared_device.sh UROCE_RUN IP PORT netns    two network namespaces, each with IP on its lo,
#                                               a pingpong pair on uroce0=IP in each at once: one
#                                               group per namespace, no probe round waits for the
#                                               other's processes (needs root; skips otherwise)
set -uo pipefail
run=$1 ip=$2 port=$3 mode=$4
export UROCE_DEVICES=uroce0=$ip UROCE_STATS=1
log=$(mktemp -d /tmp/uroce-shared.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$log"
}
trap cleanup EXIT
fail=
TIMEOUT=${TIMEOUT:-120}

# wait_listen, start_pair, check_pair, check_mckey; every process on the one device.
# shellcheck source=tests/integration/share_lib.sh
. "$(dirname "$0")/share_lib.sh"
dev=$UROCE_DEVICES

# The QPNs a pingpong log shows ("local address: … QPN 0x060011").
qpns() { grep -ho "local address: .*QPN 0x[0-9a-f]*" "$@" | grep -o "0x[0-9a-f]*$"; }

case $mode in
  many)
    # A server that never gets its client holds the device for the whole test. Without it a pair
    # may finish before the next one opens the device (300 messages take 30 ms): the last process
    # to leave removes the device's registry, QPN cursors and all, and the next pair rightly
    # starts from the first QPN again — a device that lived twice, not a QPN handed out twice.
    timeout "$TIMEOUT" "$run" ibv_rc_pingpong -d uroce0 -g 0 -p $((port + 9)) >"$log/holder" 2>&1 &
    holder=$!
    pids+=("$holder")
    wait_listen $((port + 9)) "$holder" || fail="${fail:-the holding process never listened}"
    srvs=() clis=()
    for i in 1 2 3 4; do
      start_pair "pair$i" $((port + i)) "$dev" "$dev" -s 16384 -n 300
      srvs+=("$pair_srv") clis+=("$pair_cli")
    done
    for i in 1 2 3 4; do check_pair "pair$i" "${srvs[i - 1]}" "${clis[i - 1]}"; done
    # Eight processes, eight QPNs, all different. (The holder's own line never reaches its log:
    # it is killed with its output still buffered.)
    n=$(qpns "$log"/pair*.srv "$log"/pair*.cli | sort -u | wc -l)
    ((n == 8)) || fail="${fail:-expected 8 distinct QPNs, saw $n}"
    ;;
  listen)
    export UROCE_LOG=info
    timeout "$TIMEOUT" "$run" rping -s -v -V -a "$ip" -p "$port" -C 20 >"$log/s1" 2>&1 &
    s1=$!
    pids+=("$s1")
    timeout "$TIMEOUT" "$run" rping -s -v -V -a "$ip" -p $((port + 1)) -C 20 >"$log/s2" 2>&1 &
    s2=$!
    pids+=("$s2")
    for _ in $(seq 600); do
      grep -q "rdma_cm: listening on" "$log/s1" && grep -q "rdma_cm: listening on" "$log/s2" && break
      sleep 0.05
    done
    # A third server on the first one's port: the port is the first process's (EADDRINUSE, as
    # with the kernel's CM).
    timeout "$TIMEOUT" "$run" rping -s -v -a "$ip" -p "$port" -C 1 >"$log/s3" 2>&1
    s3rc=$?
    echo "--- third server on port $port (exit $s3rc)"
    cat "$log/s3"
    ((s3rc != 0)) || fail="${fail:-a second listener on port $port was accepted}"
    grep -qi "address already in use\|EADDRINUSE\|bind.*-1\|error -98" "$log/s3" ||
      grep -q "rdma_bind_addr" "$log/s3" || fail="${fail:-the third server did not fail to bind}"
    for k in 1 2; do
      p=$((port + k - 1))
      timeout "$TIMEOUT" "$run" rping -c -v -V -a "$ip" -p "$p" -C 20 >"$log/c$k" 2>&1
      rc=$?
      echo "--- client of port $p (exit $rc)"
      cat "$log/c$k"
      got=$(grep -c "ping data: rdma-ping-" "$log/c$k")
      # rping 44.0's teardown race (see rdma_cm.sh) may end a complete run with 255.
      ((rc == 0 || (rc == 255 && got == 20))) || fail="${fail:-client of port $p: exit $rc}"
      ((got == 20)) || fail="${fail:-client of port $p: $got of 20 pings}"
    done
    wait "$s1" "$s2"
    ;;
  kill)
    # A process that opens the device and then hangs: the victim (SIGKILL while the pair runs).
    timeout "$TIMEOUT" "$run" ibv_rc_pingpong -d uroce0 -g 0 -p $((port + 9)) >"$log/victim" 2>&1 &
    victim=$!
    pids+=("$victim")
    wait_listen $((port + 9)) "$victim" || fail="${fail:-the victim never opened the device}"
    start_pair long $((port + 1)) "$dev" "$dev" -s 4096 -n 2000
    long_srv=$pair_srv long_cli=$pair_cli
    # The victim's timeout is its parent: kill the program itself.
    kill -9 "$(pgrep -P "$victim" | head -1)" 2>/dev/null
    wait "$victim" 2>/dev/null
    start_pair after $((port + 2)) "$dev" "$dev" -s 4096 -n 200
    check_pair after "$pair_srv" "$pair_cli"
    check_pair long "$long_srv" "$long_cli"
    # The dead process's QPN never comes back while the device lives.
    dead=$(grep -o "QPN 0x[0-9a-f]*" "$log/victim" | head -1 | cut -d' ' -f2)
    if [[ -n $dead ]] && qpns "$log"/after.* | grep -qx "$dead"; then
      fail="${fail:-QPN $dead of the killed process was handed out again}"
    fi
    ;;
  churn)
    secs=${CHURN_SECONDS:-20}
    # Info: each process says when it first passes on a datagram the steering sent astray.
    export UROCE_LOG=info
    end=$((SECONDS + secs))
    # The long-lived WRITE stream: fio's rdma engine (it sleeps on its completion channel, where
    # perftest would take both cores from the churn), server and client on the device.
    fio=(--ioengine=rdma --verb=write --bs=64k --size=64m --port=$((port + 1)) --hostname="$ip")
    timeout "$TIMEOUT" "$run" fio --name=server "${fio[@]}" --rw=read --iodepth=16 \
      >"$log/fio.server" 2>&1 &
    fio_srv=$!
    pids+=("$fio_srv")
    for _ in $(seq 400); do
      grep -q "rdma_cm: listening on" "$log/fio.server" && break
      sleep 0.05
    done
    timeout "$TIMEOUT" "$run" fio --name=client "${fio[@]}" --rw=write --iodepth=8 --time_based \
      --runtime="$secs" >"$log/fio.client" 2>&1 &
    fio_cli=$!
    pids+=("$fio_cli")
    round=0
    while ((SECONDS < end)) && [[ -z $fail ]]; do
      round=$((round + 1))
      # The long-lived data check: one pingpong pair after another, for the whole run.
      start_pair "seq$round" $((port + 2)) "$dev" "$dev" -s 4096 -n 200
      seq_srv=$pair_srv seq_cli=$pair_cli
      # Two pairs that run to their end, one whose two processes are killed mid-run, and a
      # process that only opened the device when it is killed.
      start_pair "a$round" $((port + 3)) "$dev" "$dev" -s 1024 -n 100
      a_srv=$pair_srv a_cli=$pair_cli
      start_pair "c$round" $((port + 4)) "$dev" "$dev" -s 8192 -n 100
      c_srv=$pair_srv c_cli=$pair_cli
      start_pair "k$round" $((port + 5)) "$dev" "$dev" -s 4096 -n 100000
      k_srv=$pair_srv k_cli=$pair_cli
      timeout "$TIMEOUT" "$run" ibv_rc_pingpong -d uroce0 -g 0 -p $((port + 6)) \
        >"$log/v$round.victim" 2>&1 &
      victim=$!
      pids+=("$victim")
      sleep 0.$((RANDOM % 4 + 1))
      # timeout is each one's parent: kill the programs themselves.
      for p in "$k_cli" "$k_srv" "$victim"; do kill -9 "$(pgrep -P "$p" | head -1)" 2>/dev/null; done
      wait "$k_cli" "$k_srv" "$victim" 2>/dev/null
      check_pair "a$round" "$a_srv" "$a_cli" >/dev/null
      check_pair "c$round" "$c_srv" "$c_cli" >/dev/null
      check_pair "seq$round" "$seq_srv" "$seq_cli" >/dev/null
    done
    wait "$fio_srv"; fsrc=$?
    wait "$fio_cli"; fcrc=$?
    echo "--- long-lived fio WRITE stream: server exit $fsrc, client exit $fcrc"
    grep -E "err=|WRITE:" "$log/fio.client"
    ((fsrc == 0 && fcrc == 0)) || fail="${fail:-fio: server exit $fsrc, client exit $fcrc}"
    grep -q "err= 0" "$log/fio.server" && grep -q "err= 0" "$log/fio.client" ||
      fail="${fail:-fio reported an I/O error}"
    grep -q "WRITE: bw=" "$log/fio.client" || fail="${fail:-fio reported no bandwidth}"
    [[ -n $fail ]] && for f in "$log"/*; do echo "--- $f"; cat "$f"; done
    # Every process had QPNs of its own: none came back after its owner died.
    all=$(qpns "$log"/*.srv "$log"/*.cli "$log"/*.victim | wc -l)
    distinct=$(qpns "$log"/*.srv "$log"/*.cli "$log"/*.victim | sort -u | wc -l)
    relayers=$(grep -l "passes on datagrams the steering brought here" "$log"/* | wc -l)
    echo "churn: $round rounds in $secs s, $all QPNs shown, $distinct distinct;" \
      "$relayers processes passed on datagrams sent astray"
    ((round >= 2)) || fail="${fail:-only $round churn rounds ran}"
    ((all == distinct)) || fail="${fail:-a QPN was handed out twice ($all shown, $distinct distinct)}"
    ;;
  mcast)
    group=239.90.$((port / 256 % 256)).$((port % 256))
    for k in 1 2; do
      # Line-buffered: the wait below reads what it printed.
      timeout "$TIMEOUT" stdbuf -oL "$run" mckey -m "$group" -b "$ip" -C 20 >"$log/r$k" 2>&1 &
      pids+=("$!")
    done
    rcv=("${pids[@]: -2}")
    for _ in $(seq 400); do
      grep -q "receiving data transfers" "$log/r1" && grep -q "receiving data transfers" "$log/r2" &&
        break
      sleep 0.05
    done
    timeout "$TIMEOUT" "$run" mckey -m "$group" -b "$ip" -s -C 20 >"$log/s" 2>&1
    check_mckey $? "${rcv[@]}"
    ;;
  netns)
    ((EUID == 0)) || { echo "SKIP: network namespaces need root"; exit 77; }
    ns=(uroce-sh-a-$$ uroce-sh-b-$$)
    trap 'for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null; done; cleanup' EXIT
    for n in "${ns[@]}"; do
      if ! { ip netns add "$n" && ip -n "$n" link set lo up && ip -n "$n" addr add "$ip/32" dev lo; }; then
        echo "FAIL: cannot set up namespace $n"
        exit 1
      fi
    done
    k=0
    for n in "${ns[@]}"; do
      k=$((k + 1))
      UROCE_LOG=info timeout "$TIMEOUT" ip netns exec "$n" "$run" ibv_rc_pingpong -d uroce0 -g 0 \
        -p "$port" -c -n 200 >"$log/$n.srv" 2>&1 &
      pids+=("$!")
    done
    srvs=("${pids[@]: -2}")
    for n in "${ns[@]}"; do
      for _ in $(seq 400); do
        ip netns exec "$n" ss -ltnH "sport = :$port" | grep -q . && break
        sleep 0.05
      done
    done
    clis=()
    for n in "${ns[@]}"; do
      UROCE_LOG=info timeout "$TIMEOUT" ip netns exec "$n" "$run" ibv_rc_pingpong -d uroce0 -g 0 \
        -p "$port" -c -n 200 127.0.0.1 >"$log/$n.cli" 2>&1 &
      clis+=("$!")
    done
    for k in 0 1; do check_pair "${ns[k]}" "${srvs[k]}" "${clis[k]}"; done
    # A registry shared by the two namespaces has each round wait for the other's members.
    grep -l "did not answer its probe" "$log"/*.srv "$log"/*.cli &&
      fail="${fail:-a probe round waited for a process of the other namespace}"
    ;;
  *) echo "shared_device.sh: unknown mode $mode" >&2; exit 2 ;;
esac
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
