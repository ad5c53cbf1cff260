#!/usr/bin/env bash
# Runs uroce-perf over uroce, against itself or against perftest's program of the same test, and
# checks what scripts that parse perftest rely on: both sides finish, the result table has
# perftest's exact heading and rows of its shape, and (between two uroce-perf processes) the
# extras hold: --check passed on both sides, --json is valid JSON reporting "ok".
#   perf.sh UROCE_RUN UROCE_PERF SERVER_IP CLIENT_IP TCP_PORT MODE TEST [options…]
# MODE: self (uroce-perf on both sides), perftest-server (ib_TEST serves a uroce-perf client),
# perftest-client (a uroce-perf server and an ib_TEST client).
# Environment: FAULTS, TIMEOUT (see lib.sh); EXPECT_SERVER / EXPECT_CLIENT: extended regular
# expressions each side's output must also match; CLIENT_ARGS: options for the client only
# (space-separated); PLOT: with CLIENT_ARGS="--plot FILE", FILE must be a well-formed SVG.
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
run=$1 perf=$2 srv_ip=$3 cli_ip=$4 port=$5 mode=$6 test=$7
shift 7

perftest=("ib_$test" -d uroce0 -x 0 -p "$port")
mine=("$perf" "$test" -d uroce0 -p "$port")
read -ra extra <<<"${CLIENT_ARGS:-}"
case $mode in
  self)
    server_cmd=("$run" "${mine[@]}" "$@")
    client_cmd=("$run" "${mine[@]}" "$@" "${extra[@]}" "$srv_ip") ;;
  perftest-server)
    server_cmd=("$run" "${perftest[@]}" "$@")
    client_cmd=("$run" "${mine[@]}" "$@" "${extra[@]}" "$srv_ip") ;;
  perftest-client)
    server_cmd=("$run" "${mine[@]}" "$@") client_cmd=("$run" "${perftest[@]}" "$@" "$srv_ip") ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
# perftest converts cycles to time with a CPU frequency it calibrates at start-up; on a loaded
# machine that can fail ("Correlation coefficient r^2 < 0.9") and its bandwidth programs then exit
# with "Can't produce a report". That says nothing of either program's protocol, so such a run is
# repeated (at most three attempts, as perftest.sh); any other failure is final.
for attempt in 1 2 3; do
  run_pair "$srv_ip" "$cli_ip" "$port"
  ((srv_rc == 0 && cli_rc == 0)) && break
  [[ $mode == self ]] && break
  grep -q "Correlation coefficient" "$log/server.out" "$log/client.out" || break
  echo "--- attempt $attempt: perftest's clock calibration failed; running again"
done

fail=
# The first failure is the one reported.
failing() { [[ -n $fail ]] || fail=$1; }
((srv_rc != 0 || cli_rc != 0)) && fail="server exit $srv_rc, client exit $cli_rc"
json=0 check=0 lat=0 duration=0
for a in "$@"; do
  case $a in --json) json=1 ;; --check) check=1 ;; -D) duration=1 ;; esac
done
[[ $test == *_lat ]] && lat=1

# perftest 6.06's headings (perftest_parameters.h), the contract with scripts.
if ((lat && duration)); then
  heading=' #bytes        #iterations       t_avg[usec]    tps average'
  fields=4
elif ((lat)); then
  heading=' #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] '
  fields=9
else
  unit='MB/sec'
  [[ " $* " == *" --report_gbits "* ]] && unit='Gb/sec'
  heading=" #bytes     #iterations    BW peak[$unit]    BW average[$unit]   MsgRate[Mpps]"
  fields=5
fi

# table FILE WHO: the heading is exact and every row under it has perftest's fields, numeric.
table() {
  local f=$1 who=$2 rows
  grep -qxF -- "$heading" "$f" || { failing "$who: no perftest heading '$heading'"; return; }
  rows=$(awk -v h="$heading" '$0 == h { on = 1; next } on && /^-+$/ { exit } on' "$f")
  [[ -n $rows ]] || { failing "$who: no result row"; return; }
  while read -r line; do
    # shellcheck disable=SC2086 # split the row into its fields
    set -- $line
    if (($# != fields)); then failing "$who: row '$line' has $# fields, perftest prints $fields"; return; fi
    for v in "$@"; do
      [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] || { failing "$who: '$v' in '$line' is not a number"; return; }
    done
  done <<<"$rows"
}

# Which sides are uroce-perf, and which print a table (a passive READ/atomic latency server
# facing perftest has nothing to print, as perftest's own).
sides=()
[[ $mode != perftest-server ]] && sides+=(server)
[[ $mode != perftest-client ]] && sides+=(client)
for side in "${sides[@]}"; do
  out=$log/$side.out
  if ((json)); then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["status"]=="ok" else 1)' "$out" ||
      failing "$side: --json output is not valid JSON with status ok"
    continue
  fi
  if ! [[ $side == server && $mode == perftest-client && $test =~ ^(read|atomic)_lat$ ]]; then
    table "$out" "$side"
  fi
  if ((check)) && [[ $mode == self ]]; then
    grep -q '^ check: passed' "$out" || failing "$side: --check did not pass"
  fi
done
# Between uroce-perf and perftest the tables must read alike: perftest's side prints the same
# heading (it is what the check above compares uroce-perf's with).
if [[ $mode != self ]]; then
  other=$log/client.out
  [[ $mode == perftest-server ]] && other=$log/server.out
  if ! [[ $mode == perftest-server && $test =~ ^(read|atomic)_lat$ ]]; then
    grep -qxF -- "$heading" "$other" || failing "perftest's own heading differs from '$heading'"
  fi
fi
if [[ -n ${PLOT:-} ]]; then
  python3 -c 'import sys, xml.etree.ElementTree as E; r=E.parse(sys.argv[1]).getroot(); sys.exit(0 if r.tag.endswith("svg") and len(r) > 3 else 1)' "$PLOT" ||
    failing "$PLOT is not an SVG with content"
  rm -f "$PLOT"
fi
if [[ -n ${EXPECT_SERVER:-} ]] && ! grep -Eq -- "$EXPECT_SERVER" "$log/server.out"; then
  failing "the server's output does not match '$EXPECT_SERVER'"
fi
if [[ -n ${EXPECT_CLIENT:-} ]] && ! grep -Eq -- "$EXPECT_CLIENT" "$log/client.out"; then
  failing "the client's output does not match '$EXPECT_CLIENT'"
fi
verdict "$fail"
