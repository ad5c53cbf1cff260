#!/usr/bin/env bash
# `uroce-sim rp` end to end: the CSV's qualitative shape for the paper and cx presets, and a
# clear error for each bad flag.   rp_shape.sh path/to/uroce-sim
set -euo pipefail
sim=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "rp_shape: $*" >&2; exit 1; }

# 1. One CNP, paper preset: halve, five fast-recovery steps, additive increase back to the line
#    rate, after which only alpha's decay shows; alpha falls monotonically.
"$sim" rp --cnp-us 100 --duration-us 3000 --csv "$tmp/one.csv"
[[ $(head -1 "$tmp/one.csv") == "t_us,event,stage,rc_gbps,rt_gbps,alpha" ]] || fail "header"
[[ $(sed -n 2p "$tmp/one.csv") == "100.000,CNP,CUT,20.000000,40.000000,1.000000" ]] ||
  fail "first row: $(sed -n 2p "$tmp/one.csv")"
awk -F, 'NR > 2 {
    if ($2 == "TIMER") {
      n++
      if (n <= 5 && $3 != "FR") bad = "timer " n " is " $3 ", not FR"
      if (n > 5 && $3 != "AI") bad = "timer " n " is " $3 ", not AI"
      if ($4 + 0 < rc) bad = "rc fell at " $1
      rc = $4 + 0; last_timer = $1 + 0
    } else if ($2 == "ALPHA") {
      if (a != "" && $6 + 0 >= a) bad = "alpha did not fall at " $1
      a = $6 + 0
    } else if ($2 != "BYTES") bad = "unexpected event " $2
  }
  END {
    if (bad != "") { print bad; exit 1 }
    if (n < 20) { print "only " n " timer events"; exit 1 }
    if (rc != 40) { print "did not recover to 40 Gb/s: " rc; exit 1 }
    if (last_timer > 2500) { print "still increasing at " last_timer; exit 1 }
  }' "$tmp/one.csv" || fail "paper shape"

# 2. A CNP every 50 µs (the NP interval): every cut lowers the rate, alpha stays near 1, and the
#    rate bottoms out at rpg_min_rate (100 Mb/s).
"$sim" rp --cnp-us 0,50,100,150,200,250,300,350,400,450,500 --duration-us 520 >"$tmp/many.csv"
awk -F, '$2 == "CNP" {
    if (rc != "" && $4 + 0 > rc) { print "a cut raised the rate at " $1; exit 1 }
    if ($6 + 0 < 0.99) { print "alpha " $6 " at " $1; exit 1 }
    rc = $4 + 0; cuts++
  }
  END { if (cuts != 11 || rc != 0.1) { print cuts " cuts, last rate " rc; exit 1 } }' \
  "$tmp/many.csv" || fail "repeated cuts"

# 3. ConnectX preset: CNPs at 10, 12 and 20 µs cut at 10, at 14 (the 12 µs CNP waits for the
#    4 µs rate_reduce_monitor_period) and at 20; the byte counter (32767 bytes) then drives the
#    recovery.
"$sim" rp --preset cx --cnp-us 10,12,20 --duration-us 400 >"$tmp/cx.csv"
[[ $(awk -F, '$2 == "CNP" { printf "%s ", $1 }' "$tmp/cx.csv") == "10.000 14.000 20.000 " ]] ||
  fail "cx cuts: $(awk -F, '$2 == "CNP" { printf "%s ", $1 }' "$tmp/cx.csv")"
grep -q ',BYTES,AI,' "$tmp/cx.csv" || fail "cx: no byte-counter increase"

# 4. Parameters by their mlx5 names.
"$sim" rp --cnp-us 0 --duration-us 60 --set rpg_time_reset=20,fr_boundary=lt >"$tmp/set.csv"
[[ $(grep -c ',TIMER,' "$tmp/set.csv") == 3 ]] || fail "--set rpg_time_reset=20"

# 5. Bad flags: a clear error naming the flag, and a failing exit status.
expect_error() {
  local want=$1
  shift
  if "$sim" rp "$@" >"$tmp/out" 2>"$tmp/err"; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/err" || fail "$*: expected '$want' in: $(cat "$tmp/err")"
}
expect_error "--line-gbps" --duration-us 10 --line-gbps abc
expect_error "--line-gbps" --duration-us 10 --line-gbps 0
expect_error "--start-gbps" --duration-us 10 --start-gbps 50
expect_error "--cnp-us times must not decrease" --duration-us 10 --cnp-us 5,3
expect_error "--cnp-us 20 is after --duration-us 10" --duration-us 10 --cnp-us 20
expect_error "--preset" --duration-us 10 --preset fast
expect_error "rpg_gd 3 is out of range" --duration-us 10 --set rpg_gd=3
expect_error "unknown key 'bogus'" --duration-us 10 --set bogus=1
expect_error "--duration-us" --cnp-us 1
expect_error "--csv /nonexistent/x.csv" --duration-us 10 --csv /nonexistent/x.csv
echo "rp_shape: ok"
