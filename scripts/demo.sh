#!/usr/bin/env bash
# The main demo: installs what uroce needs, builds it, and runs the unmodified
# /usr/bin/ibv_rc_pingpong from ibverbs-utils as server and client over uroce on this host —
# server on device uroce0 bound to 127.0.0.1, client on its own uroce0 bound to 127.0.0.2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
run=$root/build/bin/uroce-run

echo
echo "== uroce devices as ibv_devinfo sees them"
UROCE_DEVICES=uroce0=127.0.0.1 "$run" ibv_devinfo -d uroce0
echo "== ibv_rc_pingpong over uroce: 1000 x 4096-byte RC SENDs each way, data checked (-c)"
echo "   server: UROCE_DEVICES=uroce0=127.0.0.1 uroce-run ibv_rc_pingpong -d uroce0 -g 0 -c -s 4096 -n 1000"
echo "   client: UROCE_DEVICES=uroce0=127.0.0.2 uroce-run ibv_rc_pingpong -d uroce0 -g 0 -c -s 4096 -n 1000 127.0.0.1"
"$root/tests/integration/pingpong.sh" "$run" 127.0.0.1 127.0.0.2 18515 -c -s 4096 -n 1000
