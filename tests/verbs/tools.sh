#!/usr/bin/env bash
# Unmodified rdma-core tools (/usr/bin) under uroce-run: ibv_devices and ibv_devinfo -v must list
# the uroce device with its RoCE v2 GID, and uroce-run itself must behave as a transparent
# wrapper (help, exit status, LD_PRELOAD prepending).
#   tools.sh UROCE_RUN ADDRESS
set -uo pipefail
run=$1 addr=$2
fail() { echo "FAIL: $*"; exit 1; }

out=$(UROCE_DEVICES=uroce0=$addr "$run" ibv_devices 2>&1) || fail "ibv_devices exit $?: $out"
echo "$out"
grep -Eq '^\s+uroce0\s+[0-9a-f]{16}$' <<<"$out" || fail "ibv_devices does not list uroce0 with a GUID"

out=$(UROCE_DEVICES=uroce0=$addr timeout 30 "$run" ibv_devinfo -v 2>&1) || fail "ibv_devinfo exit $?: $out"
echo "$out"
grep -q 'hca_id:[[:space:]]*uroce0' <<<"$out" || fail "ibv_devinfo does not show uroce0"
grep -q 'state:[[:space:]]*PORT_ACTIVE' <<<"$out" || fail "port not active"
grep -q 'link_layer:[[:space:]]*Ethernet' <<<"$out" || fail "link layer not Ethernet"
grep -q "GID\[  0\]:[[:space:]]*::ffff:$addr, RoCE v2" <<<"$out" || fail "no RoCE v2 GID ::ffff:$addr"

"$run" --help | grep -q 'Usage: uroce-run' || fail "uroce-run --help"
"$run" sh -c 'exit 7'
[[ $? -eq 7 ]] || fail "uroce-run does not pass the exit status through"
pre=$(LD_PRELOAD=libz.so.1 "$run" sh -c 'echo "$LD_PRELOAD"')
[[ $pre == *liburoce.so*:libz.so.1 ]] || fail "LD_PRELOAD not prepended: $pre"
"$run" >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "uroce-run without a program must fail with usage (2)"

# A bad configuration costs the uroce devices and says why; it never crashes the program.
out=$(UROCE_DEVICES='uroce0=no such thing' "$run" ibv_devices 2>&1)
rc=$?
((rc < 128)) || fail "ibv_devices crashed (status $rc) on a bad UROCE_DEVICES"
grep -q 'uroce: UROCE_DEVICES' <<<"$out" || fail "no clear message for a bad UROCE_DEVICES: $out"
echo PASS
