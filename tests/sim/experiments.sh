#!/usr/bin/env bash
# The small variants of docs/congestion-control.md's experiments ("Experiments"), each
# asserting only its qualitative result; the full experiments are bench/sim_experiments.sh.
#   experiments.sh path/to/uroce-sim 1|2|3|4|5|6|7
# Every run is deterministic (virtual time, seeded), so the bounds below cannot flake: they
# are margins against the model changing, not against the machine.
set -euo pipefail
sim=$1
exp=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check FILE… <<'PY': a Python check with d[0], d[1]… the JSON summaries; a failed assert
# prints the summaries' headline values.
check() {
  python3 - "$@" 3<&0 <<'PY'
import json, os, sys
d = [json.load(open(f)) for f in sys.argv[1:]]
src = os.fdopen(3).read()
try:
    exec(src, {"d": d})
except AssertionError as e:
    print("experiment check failed:", e, file=sys.stderr)
    for f, x in zip(sys.argv[1:], d):
        print(f, {k: v for k, v in x.items() if not isinstance(v, (list, dict))}, file=sys.stderr)
    sys.exit(1)
PY
}

# dumbbell NAME [FLOWS] ARGS…: FLOWS (default 4) flows into one 40 Gb/s bottleneck, 30 ms,
# measured over 20-30 ms (the paper preset's recovery from the synchronous start takes ~15 ms).
dumbbell() {
  local name=$1 flows=4; shift
  [[ ${1:-} =~ ^[0-9]+$ ]] && { flows=$1; shift; }
  "$sim" dumbbell --flows "$flows" --start sync --duration-ms 30 --window-ms 20:30 --link-gbps 40 \
    --delay-us 1 --mtu 1024 --preset paper --kmin-kb 5 --kmax-kb 200 --pmax 0.01 --seed 1 \
    --json "$tmp/$name.json" "$@"
}

# incast NAME ARGS…: 16 senders, one message each, to one receiver.
incast() {
  local name=$1; shift
  "$sim" incast --senders 16 --preset paper --seed 1 --json "$tmp/$name.json" "$@"
}

# Experiment 4's option (docs/congestion-control.md): the in-flight cap of about one
# bandwidth-delay product, a gentle first cut and at most one rate cut per 100 µs.
option="max_inflight=32768,initial_alpha_value=64,rate_reduce_monitor_period=100"

case $exp in
1)  # DCQCN keeps the link busy, the shares fair and the queue near Kmax, marking at either
    # end; without congestion control (unlimited buffer) the queue holds the flows' windows.
    dumbbell deq --cc dcqcn --mark dequeue
    dumbbell enq --cc dcqcn --mark enqueue
    dumbbell none --cc none
    check "$tmp/deq.json" "$tmp/enq.json" "$tmp/none.json" <<'PY'
for x in d[:2]:
    assert x["util_pct"] >= 97 and x["jain"] >= 0.99, "utilisation or fairness"
    assert x["queue_max_kib"] <= 250 and x["cnp_per_s"] > 0, "queue bounded near Kmax by CNPs"
    assert x["drops"] == 0
assert d[2]["queue_mean_kib"] > 4 * d[0]["queue_mean_kib"] and d[2]["queue_mean_kib"] > 500, \
    "without DCQCN the queue grows to the windows"
assert d[2]["cnp_per_s"] == 0
PY
    ;;
2)  # 16:1 incast of 256 KiB: a finite buffer without PFC drops and resends, PFC drops nothing
    # and pauses, DCQCN pauses less.
    incast buf_none --msg-bytes 262144 --buffer-kb 512 --cc none
    incast buf_dcqcn --msg-bytes 262144 --buffer-kb 512 --cc dcqcn
    incast pfc_none --msg-bytes 262144 --pfc --cc none
    incast pfc_dcqcn --msg-bytes 262144 --pfc --cc dcqcn
    check "$tmp/buf_none.json" "$tmp/buf_dcqcn.json" "$tmp/pfc_none.json" "$tmp/pfc_dcqcn.json" <<'PY'
for x in d:
    assert x["completed"], "every message completes"
    assert x["fct_max_us"] > x["ideal_us"] > 0
for x in d[:2]:
    assert x["drops"] > 0 and x["retransmitted_packets"] > 0, "a finite buffer drops, go-back-N resends"
    assert x["pfc_pause_frames"] == 0
for x in d[2:]:
    assert x["drops"] == 0 and x["retransmitted_packets"] == 0, "no drops with PFC"
    assert x["pfc_pause_frames"] > 0
assert d[3]["pfc_pause_frames"] < d[2]["pfc_pause_frames"], "fewer pauses with DCQCN"
assert d[3]["cnps"] > 0 and d[2]["cnps"] == 0
PY
    ;;
3)  # Leaf-spine, PFC on, elephants hashed onto one spine: with PFC alone the pauses spread and
    # throttle the victim (which never crosses the congested link) to an elephant's share;
    # DCQCN, or spreading the source ports over the spines, gives it more.
    for c in "pfc none" "dcqcn dcqcn" "entropy none --entropy"; do
      read -r name cc ent <<<"$c"
      "$sim" leafspine --leaves 4 --spines 4 --hosts-per-leaf 4 --scenario pfc-spread --pfc \
        --cc "$cc" ${ent:-} --preset paper --duration-ms 4 --seed 1 --json "$tmp/$name.json"
    done
    check "$tmp/pfc.json" "$tmp/dcqcn.json" "$tmp/entropy.json" <<'PY'
pfc, dcqcn, ent = d
ports = {p["port"]: p for p in pfc["pfc_ports"]}
assert ports["h1->leaf0"]["pause_us"] > 1000, "the victim's host is paused"
assert ports["spine0->leaf0"]["tx_pause"] > 0, "the pauses spread back over the spine"
assert pfc["victim_gbps"] < 0.4 * 37, "the victim is throttled"
assert dcqcn["victim_gbps"] > 1.3 * pfc["victim_gbps"], "DCQCN frees the victim"
assert dcqcn["pfc_pause_frames"] < pfc["pfc_pause_frames"] / 10, "DCQCN pauses less"
assert ent["victim_gbps"] > 0.9 * 37 and ent["pfc_pause_frames"] == 0, "entropy: no collision"
for x in d:
    assert x["drops"] == 0
PY
    ;;
4)  # 16:1 incast of 1 MiB with PFC: plain DCQCN overshoots and then idles; the option
    # finishes within 1.2x ideal, without drops and with at most 10 pauses (the issue's goal),
    # and keeps experiment 1's utilisation and fairness. DCQCN's other weak spot, marks that
    # come late (enqueue marking: they wait out the queue), makes 16 plain flows cut through the
    # delay and idle the link; the option's one cut per 100 µs keeps it busy.
    incast dcqcn --msg-bytes 1048576 --pfc --cc dcqcn
    incast option --msg-bytes 1048576 --pfc --cc dcqcn --set "$option"
    dumbbell option_db --cc dcqcn --mark dequeue --set "$option"
    dumbbell plain16 16 --cc dcqcn --mark enqueue
    dumbbell option16 16 --cc dcqcn --mark enqueue --set "$option"
    check "$tmp/dcqcn.json" "$tmp/option.json" "$tmp/option_db.json" "$tmp/plain16.json" \
      "$tmp/option16.json" <<'PY'
plain, opt, db, plain16, opt16 = d
assert plain["completed"] and opt["completed"]
assert opt["fct_max_us"] <= 1.2 * opt["ideal_us"], "the option within 1.2x ideal"
assert plain["fct_max_us"] > 1.4 * plain["ideal_us"], "plain DCQCN well above ideal"
assert opt["drops"] == 0 and opt["pfc_pause_frames"] <= 10
assert db["util_pct"] >= 97 and db["jain"] >= 0.99, "the option keeps experiment 1's results"
assert plain16["util_pct"] < 97, "16 flows, late marks: plain DCQCN idles the link"
assert opt16["util_pct"] >= 97 and opt16["jain"] >= 0.99, "the option keeps it busy and fair"
PY
    ;;
5)  # A mixed workload on a 64-host leaf-spine runs: every kind of flow moves, nothing fails.
    "$sim" leafspine --leaves 8 --spines 4 --hosts-per-leaf 8 --scenario mixed --pfc --cc dcqcn \
      --preset paper --duration-ms 1 --seed 1 --json "$tmp/mixed.json"
    check "$tmp/mixed.json" <<'PY'
x = d[0]
assert x["hosts"] == 64
assert x["completion_errors"] == 0 and x["drops"] == 0
assert x["short_messages"] > 1000 and 0 < x["short_fct_mean_us"] <= x["short_fct_p99_us"]
assert x["goodput_gbps_total"] > 0.25 * 64 * 37, "the streams move"
assert x["events_per_s"] > 0
PY
    ;;
6)  # A lossy fabric without PFC: at 1 % random loss (each frame a switch sends to a host),
    # selective repeat resends what was lost and keeps the goodput; go-back-N resends windows
    # and loses most of it. Lossless, the two carry the same (the goodput tap counts packets
    # placed ahead once their gap fills). --paths needs --sr.
    for c in "gbn0 0" "gbn1 0.01" "sr0 0 --sr" "sr1 0.01 --sr"; do
      read -r name loss sr <<<"$c"
      dumbbell "$name" 2 --cc dcqcn --loss "$loss" ${sr:-}
    done
    # Incast drops into a 512 KiB buffer: warm SR QPs (their messages split) finish well before
    # go-back-N's.
    incast inc_gbn --msg-bytes 262144 --buffer-kb 512 --cc dcqcn
    incast inc_sr --msg-bytes 262144 --buffer-kb 512 --cc dcqcn --sr --warmup
    check "$tmp/inc_gbn.json" "$tmp/inc_sr.json" <<'PY'
gbn, sr = d
assert gbn["completed"] and sr["completed"] and gbn["drops"] > 0 and sr["drops"] > 0
assert sr["warmup"] and sr["sr_ooo_accepted"] > 0 and gbn["sr_ooo_accepted"] == 0
assert sr["fct_max_us"] < 0.5 * gbn["fct_max_us"], "warm SR recovers the incast's drops faster"
PY
    rc=0
    "$sim" dumbbell --flows 2 --duration-ms 1 --paths 4 2>"$tmp/err" || rc=$?
    [[ $rc == 2 ]] && grep -q -- "--paths needs --sr" "$tmp/err" || { echo "--paths without --sr: status $rc" >&2; exit 1; }
    check "$tmp/gbn0.json" "$tmp/gbn1.json" "$tmp/sr0.json" "$tmp/sr1.json" <<'PY'
gbn0, gbn1, sr0, sr1 = d
g = lambda x: sum(x["flow_gbps"])
assert not gbn0["selective_repeat"] and sr0["selective_repeat"] and sr1["paths"] == 1
assert gbn0["lost_frames"] == 0 and sr0["lost_frames"] == 0
assert gbn1["lost_frames"] > 0 and sr1["lost_frames"] > 0, "--loss drops"
assert gbn1["sr_selective_resends"] == 0 and sr1["sr_selective_resends"] > 0
assert sr1["sr_ooo_accepted"] > 0 and sr1["sr_sacks_sent"] > 0
assert abs(g(sr0) - g(gbn0)) < 0.03 * g(gbn0), "lossless: the same goodput"
assert sr1["retransmitted_packets"] < gbn1["retransmitted_packets"] / 2, "SR resends less"
assert sr1["retransmitted_packets"] <= 2 * sr1["lost_frames"], "SR resends about what was lost"
assert g(sr1) > 0.9 * g(sr0), "SR at 1 % keeps 0.9 of its lossless goodput"
assert g(gbn1) < 0.5 * g(gbn0), "go-back-N at 1 % loses half or more"
for x in d:
    assert x["drops"] == 0 and x["completion_errors"] == 0
PY
    ;;
7)  # PFC counters per port and priority: the collision of pfc-spread pauses ports, and a PAUSE
    # one port sends is one its neighbour receives (TxPause of a->b is RxPause of b->a, but for
    # one still on the wire at the end); the text report (--pfc-report) says what the JSON says.
    # Spraying each QP over 16 paths (warm connections) removes the collision: 10x fewer pauses,
    # no reordering taken for loss.
    "$sim" leafspine --leaves 4 --spines 4 --hosts-per-leaf 4 --scenario pfc-spread --pfc \
      --cc none --preset paper --duration-ms 4 --window-ms 0:4 --seed 1 --json "$tmp/ps.json" \
      --pfc-report "$tmp/ps.txt"
    "$sim" leafspine --leaves 4 --spines 4 --hosts-per-leaf 4 --scenario pfc-spread --pfc \
      --cc none --preset paper --duration-ms 4 --window-ms 0:4 --seed 1 --sr --paths 16 --warmup \
      --json "$tmp/spray.json"
    python3 - "$tmp/ps.json" "$tmp/ps.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
lines = [l.split() for l in open(sys.argv[2]) if not l.startswith(("#", "Port"))]
text = {(l[0], int(l[1])): [int(x) for x in l[2:6]] + [float(l[6])] for l in lines}
c = {(p["port"], p["prio"]): p for p in d["pfc_counters"]}
assert c, "the collision pauses ports"
assert any(p["tx_pause"] > 0 for (n, _), p in c.items() if n.startswith("spine0->")), "spine 0 pauses"
assert any(p["rx_pause"] > 0 and p["host"] for p in c.values()), "hosts are paused"
for (port, prio), p in c.items():
    a, b = port.split("->")
    back = c.get((b + "->" + a, prio), {"rx_pause": 0, "rx_resume": 0})
    assert 0 <= p["tx_pause"] - back["rx_pause"] <= 1, ("TxPause/RxPause", port, prio)
    assert 0 <= p["tx_resume"] - back["rx_resume"] <= 1, ("TxResume/RxResume", port, prio)
    t = text[(port, prio)]
    assert t[:4] == [p["rx_pause"], p["tx_pause"], p["rx_resume"], p["tx_resume"]], ("text", port)
    assert abs(t[4] - p["pause_us"]) < 0.001, ("text pause time", port)
assert sum(p["tx_pause"] for p in c.values()) == d["pfc_pause_frames"], "the total is the ports' sum"
assert len(text) == len(d["links"]), "every port's class 3 is listed (links: each direction)"
PY
    check "$tmp/ps.json" "$tmp/spray.json" <<'PY'
one, spray = d
assert spray["selective_repeat"] and spray["paths"] == 16 and not one["selective_repeat"]
assert spray["sr_ooo_accepted"] > 0, "sprayed packets arrive out of order and are placed"
assert spray["pfc_pause_frames"] < one["pfc_pause_frames"] / 10, "spraying: 10x fewer pauses"
assert spray["victim_gbps"] > 2 * one["victim_gbps"], "spraying frees the victim"
for x in d:
    assert x["drops"] == 0 and x["completion_errors"] == 0 and x["retransmitted_packets"] == 0
PY
    ;;
*)
  echo "experiments.sh: no experiment '$exp' (1..7)" >&2
  exit 2
  ;;
esac
echo "experiment $exp: ok"
