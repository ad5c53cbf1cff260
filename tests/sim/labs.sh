#!/usr/bin/env bash
# `uroce-sim lab NAME --quick`: each lab's headline effect (docs/labs/NAME.md), asserted on the
# numbers the run itself reports (--json), and its plot; `lab --list` and a bad name.
#   labs.sh path/to/uroce-sim NAME|list
# Every run is deterministic (virtual time, seeded), so these bounds cannot flake with the
# machine's load: they are margins against the model or the transport changing.
set -euo pipefail
sim=$1
lab=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "labs: $*" >&2; exit 1; }

if [[ $lab == list ]]; then
  "$sim" lab --list >"$tmp/list"
  for name in pfc-storm no-lossless ecn-off incast mtu-mismatch pfc-wrong-priority; do
    grep -q "^$name " "$tmp/list" || fail "--list lacks $name"
  done
  rc=0
  "$sim" lab nope 2>"$tmp/err" || rc=$?
  ((rc == 2)) || fail "an unknown lab exits $rc, not 2"
  grep -q "no lab 'nope' (pfc-storm, " "$tmp/err" || fail "unknown lab: $(cat "$tmp/err")"
  rc=0
  "$sim" lab 2>"$tmp/err" || rc=$?
  ((rc == 2)) || fail "lab without a name exits $rc, not 2"
  exit 0
fi

(cd "$tmp" && "$sim" lab "$lab" --quick --json "$tmp/lab.json" >"$tmp/report")
# The report shows the headline side by side and the switch-style PFC table; the plot is SVG.
grep -q "^  .* before .* after" "$tmp/report" || fail "no before/after header"
grep -q "priority-flow-control per port and priority" "$tmp/report" || fail "no PFC table"
head -c 200 "$tmp/lab-$lab.svg" | grep -q "<svg" || fail "no plot in lab-$lab.svg"

# check <<'PY': Python with b, a (the before and after numbers) and d (the whole JSON); a
# failed assert prints both sides' numbers.
check() {
  python3 - "$tmp/lab.json" 3<&0 <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
b, a = d["before"], d["after"]
src = os.fdopen(3).read()
try:
    exec(src, {"d": d, "b": b, "a": a})
except AssertionError as e:
    print("lab check failed:", e, file=sys.stderr)
    for side in ("before", "after"):
        print(side, {k: v for k, v in d[side].items() if not isinstance(v, (list, dict))},
              file=sys.stderr)
    sys.exit(1)
PY
}

case $lab in
pfc-storm)
  check <<'PY'
assert b["pause_frames"] > 0 and b["victim_host_paused_us"] > 0, "the collision pauses the victim's host"
assert a["pause_frames"] * 10 <= b["pause_frames"], "entropy cuts PAUSE frames at least 10x"
assert a["victim_gbps"] >= 2 * b["victim_gbps"], "the victim runs at least 2x faster"
assert b["drops"] == a["drops"] == 0, "PFC drops nothing"
PY
  ;;
no-lossless)
  check <<'PY'
assert b["drops"] > 0 and b["pause_frames"] == 0 and b["ecn_marks"] == 0, "lossy: drops, no PFC, no ECN"
assert b["retransmitted_packets"] > b["drops"], "go-back-N resends more than was dropped"
assert a["drops"] == 0 and a["retransmitted_packets"] == 0, "lossless: no drop, nothing resent"
assert a["jain"] > b["jain"] and a["min_flow_gbps"] > b["min_flow_gbps"], "fairer, no starving flow"
PY
  ;;
ecn-off)
  check <<'PY'
assert b["ecn_marks"] == 0 and b["cnps"] == 0, "no marks: DCQCN never hears of congestion"
assert a["ecn_marks"] > 0 and a["cnps"] > 0, "marks turn into CNPs"
assert b["pause_frames"] > 0 and a["pause_frames"] * 10 <= b["pause_frames"], "PAUSE frames cut at least 10x"
assert a["victim_gbps"] >= 2 * b["victim_gbps"], "the victim runs at least 2x faster"
PY
  ;;
incast)
  check <<'PY'
assert b["completed"] == a["completed"] == 1, "every message completes"
assert b["drops"] > 0 and b["retransmitted_packets"] > 0 and b["cnps"] > 0, "drops although DCQCN acts"
assert a["drops"] == 0 and a["retransmitted_packets"] == 0 and a["pause_frames"] > 0, "PFC: no drop"
assert a["fct_max_us"] * 2 <= b["fct_max_us"], "the incast completes at least 2x sooner"
PY
  ;;
mtu-mismatch)
  check <<'PY'
bad = ("leaf0->spine1", "spine1->leaf0")
crosses = lambda f: any(p in bad for p in f["path"])
assert b["mtu_drops"] > 0 and b["flows_failed"] > 0 and b["completion_errors"] > 0, "MTU drops fail QPs"
for f in d["before"]["flows"]:
    if f["name"].startswith("bulk"):
        assert (f["errors"] > 0) == crosses(f), "exactly the bulk flows across the link fail: %s" % f
small = [f for f in d["before"]["flows"] if f["name"].startswith("ping") and crosses(f)]
assert small and all(f["messages"] == f["wanted"] for f in small), "small messages pass the link"
assert a["mtu_drops"] == 0 and a["flows_failed"] == 0 and a["drops"] == 0, "one MTU: nothing lost"
assert all(f["messages"] == f["wanted"] for f in d["after"]["flows"]), "every message completes"
PY
  ;;
pfc-wrong-priority)
  check <<'PY'
assert b["drops_p0"] > 0 and b["pause_frames_p3"] == 0 and b["pause_frames"] == 0, \
    "RoCE on priority 0: drops there, no PAUSE on the lossless priority"
assert a["drops"] == 0 and a["pause_frames_p3"] > 0, "on priority 3: paused, not dropped"
assert a["retransmitted_packets"] == 0 and a["fct_max_us"] < b["fct_max_us"]
PY
  ;;
*) fail "unknown lab $lab" ;;
esac
