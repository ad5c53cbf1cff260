#!/usr/bin/env bash
# The simulator's experiments (docs/congestion-control.md, "Experiments"), all of them, from
# uroce-sim: summary tables (CSV, and Markdown on stdout) and plots (SVG) into docs/sim/, the
# raw JSON and time series into a scratch directory.
#   bench/sim_experiments.sh [BUILD_DIR] [OUT_DIR] [SCRATCH_DIR]
#   SIM_EXPERIMENTS="6 7" bench/sim_experiments.sh …   (only those experiments)
# Deterministic: the same build gives the same tables (but for wall time and events per second,
# which measure this machine). About half a minute of CPU, most of it experiment 5.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${2:-$root/docs/sim}
raw=${3:-$build/sim-experiments}
sim=$build/bin/uroce-sim
[[ -x $sim ]] || { echo "sim_experiments: no $sim (cmake --build $build --target uroce_sim_cli)" >&2; exit 1; }
mkdir -p "$out" "$raw"

# get FILE KEY…: the keys' values from a JSON summary, comma-separated.
get() {
  python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def fmt(v):
    if isinstance(v, bool): return "yes" if v else "no"
    if isinstance(v, float): return "%.4g" % v
    return str(v)
print(",".join(fmt(d[k]) for k in sys.argv[2:]))
PY
}

# table CSV: the CSV as a Markdown table.
table() {
  python3 - "$1" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
print("| " + " | ".join(rows[0]) + " |")
print("|" + " --- |" * len(rows[0]))
for r in rows[1:]:
    print("| " + " | ".join(r) + " |")
print()
PY
}

plot() { "$sim" plot "$@"; }

# want N: experiment N is among those asked for (SIM_EXPERIMENTS="6 7", default all).
want() { [[ " ${SIM_EXPERIMENTS:-1 2 3 4 5 6 7 8} " == *" $1 "* ]]; }

# The option experiment 4 measures: uroce's in-flight cap of about one bandwidth-delay product
# (the dumbbell's three 40 Gb/s hops of 1 µs: ~6.7 µs, 33 KB), a gentle first cut, and at most
# one rate cut per 100 µs (about twice the round trip with the queue at Kmax).
option="max_inflight=32768,initial_alpha_value=64,rate_reduce_monitor_period=100"

if want 1; then
echo "## Experiment 1: N long flows into one 40 Gb/s bottleneck"
e1=$out/exp1.csv
echo "flows,cc,mark,util_pct,jain,queue_mean_kib,queue_p99_kib,queue_max_kib,cnp_per_s" >"$e1"
for n in 2 4 8 16; do
  for cc in dcqcn none option; do
    for mark in dequeue enqueue; do
      [[ $cc == none && $mark == enqueue ]] && continue  # no NP: the marks change nothing
      set_args=(--cc dcqcn)
      [[ $cc == none ]] && set_args=(--cc none)
      [[ $cc == option ]] && set_args=(--cc dcqcn --set "$option")
      j=$raw/exp1_${n}_${cc}_${mark}.json
      "$sim" dumbbell --flows "$n" --start sync --duration-ms 50 --window-ms 25:50 --link-gbps 40 \
        --delay-us 1 --mtu 1024 "${set_args[@]}" --preset paper --mark "$mark" --kmin-kb 5 \
        --kmax-kb 200 --pmax 0.01 --seed 1 --json "$j" --csv "$raw/exp1_${n}_${cc}_${mark}.csv"
      echo "$n,$cc,$([[ $cc == none ]] && echo - || echo "$mark"),$(get "$j" util_pct jain queue_mean_kib queue_p99_kib queue_max_kib cnp_per_s)" >>"$e1"
    done
  done
done
table "$e1"
python3 - "$e1" "$raw/exp1_bars.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w") as f:
    w = csv.writer(f)
    w.writerow(["case", "util_pct", "jain_pct", "queue_mean_kib", "queue_max_kib"])
    for r in rows:
        name = "N=%s %s%s" % (r["flows"], r["cc"], "" if r["mark"] == "-" else " " + r["mark"][:3])
        w.writerow([name, r["util_pct"], 100 * float(r["jain"]), r["queue_mean_kib"], r["queue_max_kib"]])
PY
grep -v "none" "$raw/exp1_bars.csv" >"$raw/exp1_bars_cc.csv"
plot --csv "$raw/exp1_bars_cc.csv" --x case --y util_pct,jain_pct --bars --y-min 90 \
  --title "Experiment 1: utilisation and fairness (Jain x 100), 50 ms, window 25-50 ms" \
  --xlabel "flows, congestion control, marking" --ylabel "%" --svg "$out/exp1_util_jain.svg"
plot --csv "$raw/exp1_bars_cc.csv" --x case --y queue_mean_kib,queue_max_kib --bars \
  --title "Experiment 1: bottleneck queue (Kmin 5 KiB, Kmax 200 KiB)" \
  --xlabel "flows, congestion control, marking" --ylabel "KiB" --svg "$out/exp1_queue.svg"
for n in 4 16; do
  plot --csv "$raw/exp1_${n}_dcqcn_dequeue.csv" --x t_us --x-scale 0.001 --y 'f?_gbps,f??_gbps' \
    --title "Experiment 1: $n flows, DCQCN (paper), marking at dequeue: goodput" \
    --xlabel "time [ms]" --ylabel "Gb/s" --svg "$out/exp1_${n}_goodput.svg"
  plot --csv "$raw/exp1_${n}_dcqcn_dequeue.csv" --x t_us --x-scale 0.001 --y queue_kib \
    --title "Experiment 1: $n flows, DCQCN (paper), marking at dequeue: bottleneck queue" \
    --xlabel "time [ms]" --ylabel "KiB" --svg "$out/exp1_${n}_queue.svg"
done
fi

if want 2; then
echo "## Experiment 2: 16:1 incast"
e2=$out/exp2.csv
echo "msg_bytes,fabric,cc,fct_max_us,fct_mean_us,ideal_us,fct_over_ideal,drops,retransmitted,timeouts,probe_timeouts,pfc_pause_frames,pfc_pause_time_us,cnps,queue_max_kib" >"$e2"
for size in 65536 262144 1048576; do
  for fabric in buffer pfc; do
    for cc in none dcqcn; do
      fab=(--buffer-kb 512)
      [[ $fabric == pfc ]] && fab=(--pfc)
      j=$raw/exp2_${size}_${fabric}_${cc}.json
      "$sim" incast --senders 16 --msg-bytes "$size" "${fab[@]}" --cc "$cc" --preset paper \
        --seed 1 --json "$j" --csv "$raw/exp2_${size}_${fabric}_${cc}.csv"
      label=$([[ $fabric == pfc ]] && echo "PFC (no drop limit)" || echo "512 KiB buffer (no PFC)")
      v=$(get "$j" fct_max_us fct_mean_us ideal_us)
      ratio=$(python3 -c "import sys; a=sys.argv[1].split(','); print('%.2f' % (float(a[0]) / float(a[2])))" "$v")
      echo "$size,$label,$cc,$v,$ratio,$(get "$j" drops retransmitted_packets timeouts probe_timeouts pfc_pause_frames pfc_pause_time_us cnps queue_max_kib)" >>"$e2"
    done
  done
done
table "$e2"
python3 - "$e2" "$raw/exp2_bars.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w") as f:
    w = csv.writer(f)
    w.writerow(["case", "fct_max_over_ideal", "fct_mean_over_ideal"])
    for r in rows:
        kib = int(r["msg_bytes"]) // 1024
        fab = "PFC" if r["fabric"].startswith("PFC") else "buf"
        w.writerow(["%dK %s %s" % (kib, fab, r["cc"]), r["fct_over_ideal"],
                    "%.3f" % (float(r["fct_mean_us"]) / float(r["ideal_us"]))])
PY
plot --csv "$raw/exp2_bars.csv" --x case --y fct_max_over_ideal,fct_mean_over_ideal --bars \
  --title "Experiment 2: 16:1 incast, completion time / ideal" \
  --xlabel "message size, fabric (512 KiB buffer or PFC), congestion control" --ylabel "x ideal" \
  --svg "$out/exp2_fct.svg"
fi

if want 3; then
echo "## Experiment 3: PFC pause spreading on a leaf-spine, and what mitigates it"
e3=$out/exp3.csv
echo "case,victim_gbps,elephant_gbps_mean,pfc_pause_frames,victim_host_paused_us,spine0_pauses_sent" >"$e3"
for c in "pfc-only none" "dcqcn dcqcn" "entropy none --entropy" "entropy+dcqcn dcqcn --entropy"; do
  read -r name cc ent <<<"$c"
  j=$raw/exp3_${name}.json
  "$sim" leafspine --leaves 4 --spines 4 --hosts-per-leaf 4 --scenario pfc-spread ${ent:-} --pfc \
    --cc "$cc" --preset paper --duration-ms 10 --seed 1 --sample-us 100 --json "$j" \
    --csv "$raw/exp3_${name}.csv"
  extra=$(python3 - "$j" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ports = {p["port"]: p for p in d["pfc_ports"]}
host = ports.get("h1->leaf0", {}).get("pause_us", 0)
spine = sum(p["tx_pause"] for n, p in ports.items() if n.startswith("spine0->"))
print("%.0f,%d" % (host, spine))
PY
)
  echo "$name,$(get "$j" victim_gbps elephant_gbps_mean pfc_pause_frames),$extra" >>"$e3"
  python3 - "$j" >"$out/exp3_${name}_ports.md" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("| port | PAUSE sent | XON sent | PAUSE received | paused µs |")
print("| --- | --- | --- | --- | --- |")
for p in d["pfc_ports"]:
    if p["tx_pause"] or p["pause_us"]:
        print("| %s | %d | %d | %d | %.0f |" % (p["port"], p["tx_pause"], p["tx_resume"], p["rx_pause"], p["pause_us"]))
print()
print("| flow | path | goodput Gb/s |")
print("| --- | --- | --- |")
for f in d["flows"]:
    print("| %s | %s | %.2f |" % (f["name"], " ".join(f["path"]), f["goodput_gbps"]))
PY
done
table "$e3"
cat "$out/exp3_pfc-only_ports.md"
plot --csv "$e3" --x case --y victim_gbps,elephant_gbps_mean --bars \
  --title "Experiment 3: the victim flow's goodput (window 5-10 ms)" \
  --xlabel "PFC on; congestion control and ECMP entropy" --ylabel "Gb/s" --svg "$out/exp3_goodput.svg"
plot --csv "$raw/exp3_pfc-only.csv" --x t_us --x-scale 0.001 --y 'victim_gbps,elephant?_gbps' \
  --title "Experiment 3: PFC alone — the victim is paused with the elephants" \
  --xlabel "time [ms]" --ylabel "Gb/s" --svg "$out/exp3_pfc_only_series.svg"
fi

if want 4; then
echo "## Experiment 4: beyond DCQCN — 16:1 incast of 1 MiB"
e4=$out/exp4.csv
echo "case,set,fct_max_us,fct_mean_us,ideal_us,fct_over_ideal,drops,pfc_pause_frames,cnps,queue_max_kib" >"$e4"
for c in "dcqcn -" "dcqcn+cap max_inflight=32768" "dcqcn+gentle-alpha initial_alpha_value=64" \
         "dcqcn+cut-period rate_reduce_monitor_period=100" "dcqcn+option $option" "none -" \
         "none+cap max_inflight=32768"; do
  read -r name set <<<"$c"
  cc=dcqcn
  [[ $name == none* ]] && cc=none
  args=(--cc "$cc")
  [[ $set != - ]] && args+=(--set "$set")
  j=$raw/exp4_${name}.json
  "$sim" incast --senders 16 --msg-bytes 1048576 --pfc "${args[@]}" --preset paper --seed 1 \
    --json "$j" --csv "$raw/exp4_${name}.csv" --sample-us 20
  v=$(get "$j" fct_max_us fct_mean_us ideal_us)
  ratio=$(python3 -c "import sys; a=sys.argv[1].split(','); print('%.3f' % (float(a[0]) / float(a[2])))" "$v")
  echo "$name,${set//,/ },$v,$ratio,$(get "$j" drops pfc_pause_frames cnps queue_max_kib)" >>"$e4"
done
table "$e4"
plot --csv "$e4" --x case --y fct_over_ideal --bars --y-min 0 \
  --title "Experiment 4: 16:1 incast of 1 MiB with PFC, completion time / ideal" \
  --xlabel "congestion control and options" --ylabel "x ideal" --svg "$out/exp4_fct.svg"
for name in dcqcn dcqcn+option; do
  plot --csv "$raw/exp4_${name}.csv" --x t_us --x-scale 0.001 --y 'f?_rc_gbps,f??_rc_gbps' \
    --title "Experiment 4: $name — every sender's DCQCN rate" --xlabel "time [ms]" \
    --ylabel "Gb/s" --svg "$out/exp4_${name}_rates.svg"
  plot --csv "$raw/exp4_${name}.csv" --x t_us --x-scale 0.001 --y queue_kib \
    --title "Experiment 4: $name — the receiver's switch port" --xlabel "time [ms]" \
    --ylabel "KiB" --svg "$out/exp4_${name}_queue.svg"
done
fi

if want 5; then
echo "## Experiment 5: scale — a leaf-spine with a mixed workload"
e5=$out/exp5.csv
echo "hosts,leaves,spines,hosts_per_leaf,sim_ms,events,wall_s,events_per_s,goodput_gbps_total,short_messages,short_fct_mean_us,short_fct_p99_us,drops,pfc_pause_frames,cnps,completion_errors" >"$e5"
for topo in "16 8 16 1" "32 8 16 0.5"; do
  read -r l s h ms <<<"$topo"
  j=$raw/exp5_$((l * h)).json
  "$sim" leafspine --leaves "$l" --spines "$s" --hosts-per-leaf "$h" --scenario mixed --pfc \
    --cc dcqcn --preset paper --duration-ms "$ms" --seed 1 --sample-us 10 --json "$j"
  echo "$((l * h)),$l,$s,$h,$ms,$(get "$j" events wall_s events_per_s goodput_gbps_total short_messages short_fct_mean_us short_fct_p99_us drops pfc_pause_frames cnps completion_errors)" >>"$e5"
done
table "$e5"
fi

if want 6; then
echo "## Experiment 6: a lossy fabric without PFC — go-back-N against selective repeat"
# 6a: random loss. Four 1 MiB WRITE streams into one 40 Gb/s bottleneck (experiment 1's
# dumbbell, DCQCN, unlimited buffer: no drop but the random ones), each frame a switch sends to
# a host lost with probability P (--loss: the end-to-end loss of every packet and every ACK);
# warm connections (--warmup), and selective repeat's cold start once for contrast.
e6=$out/exp6.csv
echo "transport,loss_pct,goodput_gbps,of_lossless,message_fct_p50_us,message_fct_p99_us,messages,lost_frames,retransmitted,selective_resends,timeouts,probe_timeouts" >"$e6"
for tr in gbn sr sr-cold; do
  lossless=
  for loss in 0 0.0001 0.001 0.01; do
    [[ $tr == sr-cold && $loss != 0 && $loss != 0.01 ]] && continue
    args=(--warmup)
    [[ $tr == sr ]] && args=(--warmup --sr)
    [[ $tr == sr-cold ]] && args=(--sr)
    j=$raw/exp6_${tr}_${loss}.json
    "$sim" dumbbell --flows 4 --start sync --duration-ms 50 --window-ms 10:50 --link-gbps 40 \
      --delay-us 1 --mtu 1024 --cc dcqcn --preset paper --loss "$loss" "${args[@]}" --seed 1 \
      --json "$j"
    g=$(python3 -c "import json,sys; print('%.2f' % sum(json.load(open(sys.argv[1]))['flow_gbps']))" "$j")
    [[ -z $lossless ]] && lossless=$g
    ratio=$(python3 -c "import sys; print('%.3f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$g" "$lossless")
    pct=$(python3 -c "import sys; print('%g' % (100 * float(sys.argv[1])))" "$loss")
    echo "$tr,$pct,$g,$ratio,$(get "$j" message_fct_p50_us message_fct_p99_us messages_completed lost_frames retransmitted_packets sr_selective_resends timeouts probe_timeouts)" >>"$e6"
  done
done
table "$e6"
python3 - "$e6" "$raw/exp6_bars.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w") as f:
    w = csv.writer(f)
    w.writerow(["loss", "go-back-N", "selective repeat"])
    for loss in dict.fromkeys(r["loss_pct"] for r in rows if r["transport"] == "gbn"):
        g = {r["transport"]: r["goodput_gbps"] for r in rows if r["loss_pct"] == loss}
        w.writerow([loss + " %", g["gbn"], g["sr"]])
PY
plot --csv "$raw/exp6_bars.csv" --x loss --y 'go-back-N,selective repeat' --bars \
  --title "Experiment 6: 4 flows into a 40 Gb/s bottleneck, random loss: total goodput" \
  --xlabel "loss per packet (every packet and ACK)" --ylabel "Gb/s" --svg "$out/exp6_goodput.svg"

# 6b: incast-driven drops: experiment 2's 16:1 incast into a 512 KiB shared buffer, no PFC;
# without congestion control, with DCQCN, and with the in-flight cap alone (IRN's BDP cap:
# max_inflight 32 KiB, about one bandwidth-delay product). Selective repeat cold (every QP's
# one message is its connection's first WRITE, which leaves whole: docs/selective-repeat.md)
# and warm (--warmup: 64 bytes first, the message 100 µs later, so it is split).
e6b=$out/exp6b.csv
echo "msg_bytes,cc,transport,fct_max_us,fct_mean_us,ideal_us,fct_over_ideal,drops,retransmitted,sr_ooo_accepted,selective_resends,probe_timeouts,timeouts" >"$e6b"
for size in 262144 1048576; do
  for cc in none dcqcn cap; do
    for tr in gbn sr sr-warm; do
      args=(--cc "$cc")
      [[ $cc == cap ]] && args=(--cc none --set max_inflight=32768)
      [[ $tr == sr* ]] && args+=(--sr)
      [[ $tr == sr-warm ]] && args+=(--warmup)
      j=$raw/exp6b_${size}_${cc}_${tr}.json
      "$sim" incast --senders 16 --msg-bytes "$size" --buffer-kb 512 --preset paper "${args[@]}" \
        --seed 1 --json "$j"
      v=$(get "$j" fct_max_us fct_mean_us ideal_us)
      ratio=$(python3 -c "import sys; a=sys.argv[1].split(','); print('%.2f' % (float(a[0]) / float(a[2])))" "$v")
      echo "$size,$cc,$tr,$v,$ratio,$(get "$j" drops retransmitted_packets sr_ooo_accepted sr_selective_resends probe_timeouts timeouts)" >>"$e6b"
    done
  done
done
table "$e6b"
fi

# The leaf-spine of experiments 7 and 8: 8 leaves × 8 hosts at 100 Gb/s, 4 spines, leaf-spine
# links at 200 Gb/s (non-blocking: each leaf's 800 Gb/s of hosts has 800 Gb/s of uplinks), path
# MTU 4096, PFC; every host sends to one other, a random permutation (seeded) in which no host
# sends under its own leaf: every flow crosses a spine, ECMP hashes each leaf's 8 flows onto
# its 4 uplinks, and a spine's port down to a leaf takes the flows of every leaf that hashed
# there. Warm connections (--warmup): the flows start at 100 µs.
ls_args=(--leaves 8 --spines 4 --hosts-per-leaf 8 --link-gbps 100 --fabric-gbps 200 --mtu 4096
         --delay-us 1 --preset paper --seed 1 --pfc --warmup)
# permutation FILE MSG_BYTES MESSAGES DEPTH [FLOWS]: the workload (MESSAGES 0: streams); with
# FLOWS, only the first FLOWS flows.
permutation() {
  python3 - "$@" <<'PY'
import random, sys
path, size, n, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
flows = int(sys.argv[5]) if len(sys.argv) > 5 else 64
r = random.Random(1)
while True:
    p = list(range(64))
    r.shuffle(p)
    if all(p[i] // 8 != i // 8 for i in range(64)):
        break
with open(path, "w") as f:
    for i in range(flows):
        f.write("p%d %d %d %d %d %d 0\n" % (i, i, p[i], size, n, depth))
PY
}

if want 7; then
echo "## Experiment 7: the PFC storm — ECMP collisions on a 64-host leaf-spine, one path against spraying"
# Every flow an elephant of 4 MiB, written as 16 WRITEs of 256 KiB, 4 outstanding, on a warm
# connection (selective repeat splits — and sprays — a WRITE only once the peer's first
# response showed it speaks selective repeat: docs/simulator.md, "Cold and warm connections").
e7=$out/exp7.csv
permutation "$raw/exp7_flows.txt" 262144 16 4
permutation "$raw/exp7_solo.txt" 262144 16 4 1
echo "cc,transport,paths,fct_p50_us,fct_p99_us,ideal_us,p99_over_ideal,pfc_pause_frames,spine_pause_frames,pfc_pause_time_us,paused_ports,max_flows_per_uplink,retransmitted,ecn_rotations,loss_rotations,completed" >"$e7"
# flowstats JSON [IDEAL]: flow completion p50, p99 (nearest rank: of 64 flows, the slowest), …
flowstats() {
  python3 - "$@" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
f = sorted(x["fct_us"] for x in d["flows"] if x["messages"] == x["wanted"])
pct = lambda p: f[max(1, math.ceil(p * len(f))) - 1]
if len(sys.argv) == 2:
    print("%.1f" % f[-1]); sys.exit()
ideal = float(sys.argv[2])
paused = len({p["port"] for p in d["pfc_counters"] if p["pause_us"] > 0})
spine = sum(p["tx_pause"] for p in d["pfc_counters"] if p["port"].startswith("spine"))
# The most flows ECMP put on one uplink by their QPN's source port (two fill a 200 Gb/s uplink).
ups = {}
for x in d["flows"]:
    ups[x["path"][0]] = ups.get(x["path"][0], 0) + 1
up = max(ups.values())
print("%.1f,%.1f,%.1f,%.3f,%d,%d,%.1f,%d,%d,%d,%d,%d,%d" % (
    pct(0.5), pct(0.99), ideal, pct(0.99) / ideal, d["pfc_pause_frames"], spine,
    d["pfc_pause_time_us"], paused, up, d["retransmitted_packets"], d["mp_ecn_rotations"],
    d["mp_path_rotations"], len(f)))
PY
}
# Three congestion-control settings: none at all (PFC alone); `np`, uroce's device default (the
# NP answers CE marks with CNPs, no rate control: the CNPs only steer sprayed paths); DCQCN.
for cc in none np dcqcn; do
  ccargs=(--cc "$cc")
  [[ $cc == np ]] && ccargs=(--cc none --set np=1)
  # The ideal: the same flow alone on the idle fabric (headers, start-up and round trips included).
  j=$raw/exp7_${cc}_solo.json
  "$sim" leafspine "${ls_args[@]}" "${ccargs[@]}" --workload "$raw/exp7_solo.txt" --duration-ms 3 \
    --window-ms 0:3 --json "$j"
  ideal=$(flowstats "$j")
  for c in "gbn 1" "sr 1" "sr 4" "sr 16" "sr 64"; do
    read -r tr paths <<<"$c"
    args=(--paths "$paths")
    [[ $tr == sr ]] && args+=(--sr)
    j=$raw/exp7_${cc}_${tr}_${paths}.json
    "$sim" leafspine "${ls_args[@]}" "${ccargs[@]}" "${args[@]}" --workload "$raw/exp7_flows.txt" \
      --duration-ms 3 --window-ms 0:3 --json "$j" --pfc-report "$raw/exp7_${cc}_${tr}_${paths}_pfc.txt"
    echo "$cc,$tr,$paths,$(flowstats "$j" "$ideal")" >>"$e7"
  done
done
table "$e7"
# The switches' view of the storm (PFC alone, go-back-N, one path; then spraying over 16 paths):
# the ports that sent, received or obeyed a PAUSE.
for c in gbn_1 sr_16; do
  {
    head -2 "$raw/exp7_none_${c}_pfc.txt"
    tail -n +3 "$raw/exp7_none_${c}_pfc.txt" | awk '$3 + $4 + $5 + $6 > 0 || $7 > 0'
  } >"$out/exp7_pfc_report_${c}.txt"
done
echo '```'
cat "$out/exp7_pfc_report_gbn_1.txt"
echo '```'
python3 - "$e7" "$raw/exp7_bars.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["transport"] == "sr" or r["paths"] == "1"]
with open(sys.argv[2], "w") as f:
    w = csv.writer(f)
    w.writerow(["case", "p99_over_ideal", "pauses_per_100"])
    for r in rows:
        w.writerow(["%s %s %s" % (r["cc"], r["transport"], r["paths"]), r["p99_over_ideal"],
                    int(r["pfc_pause_frames"]) / 100])
PY
plot --csv "$raw/exp7_bars.csv" --x case --y p99_over_ideal,pauses_per_100 --bars \
  --title "Experiment 7: 64-host leaf-spine, PFC: flow completion p99 / ideal and PAUSE frames / 100" \
  --xlabel "congestion control, transport, paths per QP" --ylabel "x ideal; PAUSEs / 100" \
  --svg "$out/exp7_storm.svg"
fi

if want 8; then
echo "## Experiment 8: permutation traffic on the leaf-spine — fabric utilisation against paths per QP"
e8=$out/exp8.csv
permutation "$raw/exp8_flows.txt" 1048576 0 2
echo "cc,transport,paths,goodput_gbps_total,per_host_gbps,uplink_util_mean_pct,uplink_util_min_pct,uplink_util_max_pct,pfc_pause_frames,ecn_marks,retransmitted,ecn_rotations" >"$e8"
for cc in dcqcn none; do
  for c in "gbn 1" "sr 1" "sr 4" "sr 16" "sr 64"; do
    read -r tr paths <<<"$c"
    args=(--paths "$paths")
    [[ $tr == sr ]] && args+=(--sr)
    j=$raw/exp8_${cc}_${tr}_${paths}.json
    "$sim" leafspine "${ls_args[@]}" --cc "$cc" "${args[@]}" --workload "$raw/exp8_flows.txt" \
      --duration-ms 3 --window-ms 1:3 --json "$j"
    u=$(python3 - "$j" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
up = [l["util_pct"] for l in d["links"] if l["link"].startswith("leaf") and "->spine" in l["link"]]
print("%.2f,%.1f,%.1f,%.1f" % (d["goodput_gbps_total"] / 64, sum(up) / len(up), min(up), max(up)))
PY
)
    echo "$cc,$tr,$paths,$(get "$j" goodput_gbps_total),$u,$(get "$j" pfc_pause_frames ecn_marks retransmitted_packets mp_ecn_rotations)" >>"$e8"
  done
done
table "$e8"
python3 - "$e8" "$raw/exp8_bars.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w") as f:
    w = csv.writer(f)
    w.writerow(["case", "dcqcn", "none"])
    for case in dict.fromkeys((r["transport"], r["paths"]) for r in rows):
        g = {r["cc"]: r["per_host_gbps"] for r in rows if (r["transport"], r["paths"]) == case}
        w.writerow(["%s %s" % case, g["dcqcn"], g["none"]])
PY
plot --csv "$raw/exp8_bars.csv" --x case --y dcqcn,none --bars \
  --title "Experiment 8: permutation on a 64-host leaf-spine, goodput per host (most: 97.7)" \
  --xlabel "transport, paths per QP" --ylabel "Gb/s" --svg "$out/exp8_goodput.svg"
fi

echo "sim_experiments: tables and plots in $out, raw results in $raw"
