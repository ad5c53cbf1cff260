#!/usr/bin/env bash
# Discovery with no root step (src/verbs/discovery.cc): unmodified programs under uroce-run — ls,
# cat, stat, readlink, realpath and Python, the tools rdma-core's test suite and UCX lean on — see
# a uroce device in /sys/class/infiniband and /dev/infiniband, consistently with the verbs; and
# without uroce-run (or with UROCE_DISCOVERY=0) they do not.
#
#   discovery.sh UROCE_RUN DEVICE ADDRESS
set -uo pipefail
run=$1 dev=$2 addr=$3
export UROCE_DEVICES=$dev=$addr
sys=/sys/class/infiniband/$dev
fail=
check() {  # check WHAT EXPECTED ACTUAL
  if [[ $2 != "$3" ]]; then
    echo "FAIL: $1: expected '$2', got '$3'"
    fail=1
  else
    echo "ok: $1: $3"
  fi
}

if [[ -e $sys || -e /dev/infiniband/$dev ]]; then
  echo "SKIP: $sys or /dev/infiniband/$dev exists for real here"
  exit 77
fi

check "ls /sys/class/infiniband" "$dev" "$("$run" ls /sys/class/infiniband | grep -x "$dev")"
check "ls device/net (rdma-core's tests: the netdev)" "lo" "$("$run" ls "$sys/device/net/")"
check "GID type" "RoCE v2" "$("$run" cat "$sys/ports/1/gid_attrs/types/0")"
check "GID netdev" "lo" "$("$run" cat "$sys/ports/1/gid_attrs/ndevs/0")"
gid=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${addr//./ })
check "GID 0" "$gid" "$("$run" cat "$sys/ports/1/gids/0")"
check "port state" "4: ACTIVE" "$("$run" cat "$sys/ports/1/state")"
check "the node's type" "character special file" "$("$run" stat -c %F "/dev/infiniband/$dev")"
check "readlink of the netdev" "../../../../net/lo" "$("$run" readlink "$sys/device/net/lo")"
check "the netdev's MTU through the link" "$(cat /sys/class/net/lo/mtu)" \
  "$("$run" cat "$sys/device/net/lo/mtu")"
check "realpath of the netdev" "$(realpath /sys/class/net/lo)" "$("$run" realpath "$sys/device/net/lo")"
# Python, as rdma-core's tests/base.py asks: os.path.exists, then `ls` in a subprocess.
py=$("$run" python3 -c "
import os, subprocess
d = '$sys/device/net/'
print(os.path.exists(d), os.path.isdir('/sys/class/infiniband'),
      '$dev' in os.listdir('/sys/class/infiniband'),
      subprocess.check_output(['ls', d]).decode().split()[0],
      open('$sys/ports/1/gid_attrs/types/0').read().strip())")
check "Python" "True True True lo RoCE v2" "$py"
# The same for ibv_devices (the real libibverbs' tool): it lists the device by its GUID.
check "the node GUID, as ibv_devices reports it" \
  "$("$run" ibv_devices | awk -v d="$dev" '$1 == d {print $2}')" \
  "$("$run" cat "$sys/node_guid" | tr -d :)"

# The check can fail: without the preload, or with the view off, there is nothing.
check "without uroce-run" "absent" "$([[ -e $sys ]] && echo present || echo absent)"
check "UROCE_DISCOVERY=0" "absent" \
  "$(UROCE_DISCOVERY=0 "$run" sh -c "[ -e $sys ] && echo present || echo absent")"

if [[ -n $fail ]]; then
  echo "FAIL"
  exit 1
fi
echo "PASS"
