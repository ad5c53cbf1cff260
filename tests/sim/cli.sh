#!/usr/bin/env bash
# `uroce-sim dumbbell|incast|leafspine` end to end: every JSON key the docs name, the CSV's
# header, a capture tshark decodes, identical reruns, and a clear error for bad flags.
#   cli.sh path/to/uroce-sim
set -euo pipefail
sim=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "cli: $*" >&2; exit 1; }

has_keys() {  # file key…
  local f=$1; shift
  python3 - "$f" "$@" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
missing = [k for k in sys.argv[2:] if k not in d]
if missing:
    sys.exit("missing keys in %s: %s" % (sys.argv[1], ", ".join(missing)))
PY
}

# dumbbell: the issue's keys; two flows sharing 40 Gb/s, nothing dropped (unlimited buffer).
"$sim" dumbbell --flows 2 --start sync --duration-ms 2 --window-ms 1:2 --link-gbps 40 \
  --delay-us 1 --mtu 1024 --cc dcqcn --preset paper --mark dequeue --kmin-kb 5 --kmax-kb 200 \
  --pmax 0.01 --seed 3 --json "$tmp/db.json" --csv "$tmp/db.csv" --pcap "$tmp/db.pcap"
has_keys "$tmp/db.json" util_pct jain queue_mean_kib queue_p99_kib queue_max_kib cnp_per_s drops \
  pfc_pause_frames flow_gbps events_per_s flows pfc_ports
python3 - "$tmp/db.json" <<'PY' || fail "dumbbell values"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["flow_gbps"]) == 2, d["flow_gbps"]
assert 0 < d["util_pct"] <= 100.0001, d["util_pct"]
assert 0 < sum(d["flow_gbps"]) <= 37.1, d["flow_gbps"]
assert d["drops"] == 0
PY
[[ $(head -1 "$tmp/db.csv") == "t_us,queue_kib,f0_gbps,f0_rc_gbps,f0_alpha,f1_gbps,f1_rc_gbps,f1_alpha,pause_frames" ]] ||
  fail "dumbbell CSV header: $(head -1 "$tmp/db.csv")"
(($(wc -l <"$tmp/db.csv") > 100)) || fail "dumbbell CSV rows"
# Identical reruns (apart from what measures the machine).
"$sim" dumbbell --flows 2 --duration-ms 2 --window-ms 1:2 --seed 3 --json "$tmp/db2.json"
diff <(grep -v -e wall_s -e events_per_s "$tmp/db.json") \
     <(grep -v -e wall_s -e events_per_s "$tmp/db2.json") >/dev/null || fail "reruns differ"

# incast with PFC: the issue's keys, every message complete, no drops.
"$sim" incast --senders 4 --msg-bytes 65536 --pfc --xoff-kb 20 --xon-kb 10 --json "$tmp/in.json" \
  --pcap "$tmp/in.pcap" --pcap-link h0-s0
has_keys "$tmp/in.json" fct_max_us fct_mean_us ideal_us drops retransmitted_packets timeouts \
  queue_max_kib cnps pfc_pause_frames pfc_pause_time_us
python3 - "$tmp/in.json" <<'PY' || fail "incast values"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["completed"] and d["drops"] == 0 and d["pfc_pause_frames"] > 0, d
assert d["fct_max_us"] > d["ideal_us"] > 0
PY

# leafspine, a workload file.
cat >"$tmp/w.txt" <<'W'
# name src dst msg_bytes messages depth start_us [mean_gap_us]
a 0 3 65536 0 2 0
b 1 2 16384 0 4 5 10
W
"$sim" leafspine --leaves 2 --spines 2 --hosts-per-leaf 2 --workload "$tmp/w.txt" \
  --duration-ms 1 --json "$tmp/ls.json"
has_keys "$tmp/ls.json" links pfc_ports flows goodput_gbps_total events_per_s

# Captures open in tshark: RoCE in both, the sender's link carries the PAUSE frames.
if command -v tshark >/dev/null; then
  n=$(tshark -r "$tmp/db.pcap" -Y infiniband 2>/dev/null | wc -l)
  ((n > 1000)) || fail "tshark sees $n RoCE frames in the dumbbell capture"
  n=$(tshark -r "$tmp/in.pcap" -Y macc 2>/dev/null | wc -l)
  ((n > 0)) || fail "tshark sees no PAUSE in the incast sender's capture"
else
  echo "cli: tshark not installed: capture decoding not checked"
fi

# plot: a well-formed SVG from the dumbbell's CSV (lines) and from a small table (bars).
"$sim" plot --csv "$tmp/db.csv" --x t_us --x-scale 0.001 --y 'f?_gbps' --svg "$tmp/lines.svg" \
  --title "two flows" --xlabel "time [ms]" --ylabel "Gb/s"
printf 'case,fct,ideal\nA,3.5,3.3\nB,5.6,3.3\n' >"$tmp/bars.csv"
"$sim" plot --csv "$tmp/bars.csv" --x case --y fct,ideal --bars --svg "$tmp/bars.svg"
# CRLF line ends (RFC 4180's, Python's csv module's): the last column is a column like the others.
printf 'case,fct,ideal\r\nA,3.5,3.3\r\nB,5.6,3.3\r\n' >"$tmp/crlf.csv"
"$sim" plot --csv "$tmp/crlf.csv" --x case --y fct,ideal --bars --svg "$tmp/crlf.svg"
for f in lines bars crlf; do
  python3 -c "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); \
    assert d.documentElement.tagName == 'svg'; \
    assert d.getElementsByTagName('polyline' if sys.argv[2] == 'lines' else 'rect')" \
    "$tmp/$f.svg" "$f" || fail "$f.svg is not a plot"
done
for f in bars crlf; do
  grep -q '>ideal</text>' "$tmp/$f.svg" || fail "$f.svg: the last column 'ideal' is not plotted"
done

# Bad flags: exit status 2 and a message naming the flag.
bad() {  # expected-substring args…
  local want=$1; shift
  local rc=0
  "$sim" "$@" 2>"$tmp/err" >/dev/null || rc=$?
  ((rc == 2)) || fail "$* exited $rc, not 2"
  grep -q -- "$want" "$tmp/err" || fail "$*: '$(cat "$tmp/err")' does not name $want"
}
bad "--mark" dumbbell --flows 2 --duration-ms 1 --mark sometimes
bad "--xon-kb" dumbbell --flows 2 --duration-ms 1 --pfc --xoff-kb 3 --xon-kb 5
bad "--xoff-kb and --xon-kb need --pfc" dumbbell --flows 2 --duration-ms 1 --xoff-kb 3
bad "rpg_gd" dumbbell --flows 2 --duration-ms 1 --set rpg_gd=3
bad "--window-ms" dumbbell --flows 2 --duration-ms 1 --window-ms 3:4
bad "--pcap-link" dumbbell --flows 2 --duration-ms 1 --pcap "$tmp/x.pcap" --pcap-link nope
bad "--ecmp-hash" incast --senders 2 --msg-bytes 1000 --ecmp-hash md5
bad "--mtu" incast --senders 2 --msg-bytes 1000 --mtu 1500
bad "exactly one of" leafspine --leaves 2 --spines 2 --hosts-per-leaf 2
bad "pfc-spread needs" leafspine --leaves 2 --spines 2 --hosts-per-leaf 2 --scenario pfc-spread
bad "workload line 2" leafspine --leaves 2 --spines 1 --hosts-per-leaf 1 --workload "$tmp/w.txt"
bad "no column matches 'nope'" plot --csv "$tmp/bars.csv" --x case --y nope --svg "$tmp/x.svg"
echo "cli: ok"
