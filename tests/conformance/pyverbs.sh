#!/usr/bin/env bash
# Runs rdma-core's own verbs test suite (pyverbs' tests, Debian package python3-pyverbs, shipped
# gzipped in /usr/share/doc/rdma-core/tests) against a uroce device, through uroce-run.
#
#   pyverbs.sh UROCE_RUN ADDRESS [MODULE…]      (default: the generic modules listed below)
#
# PASS when no test fails, errors or crashes the interpreter, and every skip gives a reason on
# the list below: a feature uroce reports as unsupported (docs/verbs.md, "rdma-core's test
# suite"), or one the host lacks. Any other skip fails the run, so a feature that regresses into
# EOPNOTSUPP cannot hide as a skip. Exit 77 (ctest: skipped) when the suite is not installed.
# Environment: TIMEOUT (seconds, default 300), PYTHON (default /usr/bin/python3: the Debian
# interpreter, which is the one python3-pyverbs is built for).
set -uo pipefail
run=$1 addr=$2
shift 2
python=${PYTHON:-/usr/bin/python3}
src=/usr/share/doc/rdma-core/tests

if ! "$python" -c 'import pyverbs.device' 2>/dev/null || [[ ! -e $src/run_tests.py ]]; then
  echo "SKIP: rdma-core's pyverbs test suite is not installed (scripts/install-deps.sh: python3-pyverbs)"
  exit 77
fi

# The generic modules: not specific to a vendor (mlx5, efa). rdma-core 44 has no test_srq module;
# SRQs are exercised inside test_odp and test_cqex.
modules=("$@")
if ((${#modules[@]} == 0)); then
  # test_rdmacm is not among them: it connects to the first address of the device's netdev (lo:
  # 127.0.0.1), so it runs on a device of that address (conformance.pyverbs_rdmacm).
  for m in device pd mr cq cq_events cqex qp qpex srq atomic addr shared_pd relaxed_ordering \
    fork odp flow parent_domain; do
    if [[ -e $src/test_$m.py || -e $src/test_$m.py.gz ]]; then
      modules+=("tests.test_$m")
    else
      echo "note: rdma-core $(dpkg-query -W -f='${Version}' python3-pyverbs 2>/dev/null) has no test_$m"
    fi
  done
fi

# Skip reasons that are the truth about uroce (each feature is listed in docs/verbs.md) or about
# the host (no hugepages, no GPU to allocate a dma-buf from). Extended regular expressions, one
# per line, matched against the reason in unittest's "skipped '…'".
allowed_skips=(
  "Device memory is not supported"
  "ODP is not supported"                                  # a kernel before 5.14 (docs/verbs.md)
  "Parent Domain is not supported on this device"
  "Importing a device is not supported"
  "Create QP type 8 is not supported"                     # IBV_QPT_RAW_PACKET
  "Create Raw Packet QP .* is not supported"
  "To Create RAW QP must be done by root on Ethernet link layer"
  "There are no huge pages of size .* allocated"
  "Allocating dmabuf is not supported"
  "All gid indices populated, cannot check bad flow"
)

work=$(mktemp -d /tmp/uroce-pyverbs.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/tests"
gunzip -f "$work"/tests/*.gz

out=$work/out.txt
start=$(date +%s%N)
(cd "$work/tests" &&
  UROCE_DEVICES=uroce0=$addr timeout "${TIMEOUT:-300}" "$run" "$python" run_tests.py \
    --dev uroce0 --gid 0 -v "${modules[@]}") >"$out" 2>&1
rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
cat "$out"

fail=
((rc == 124)) && fail="the suite did not finish within ${TIMEOUT:-300} s"
((rc > 128 && rc != 124)) && fail="the interpreter died (exit $rc: signal $((rc - 128)))"
grep -qE '^Ran [0-9]+ test' "$out" || fail=${fail:-"the suite did not run to its end (exit $rc)"}
bad=$(grep -E '\.\.\. (FAIL|ERROR)$' "$out")
[[ -n $bad ]] && fail=${fail:-"failing tests:
$bad"}
((rc != 0)) && fail=${fail:-"the suite exited $rc"}
# unittest prints the reason with repr(): in single quotes, or in double quotes when the reason
# holds a single quote.
unexpected=$(grep -oE "skipped ('[^']*'|\"[^\"]*\")" "$out" | sed -E "s/^skipped ['\"](.*)['\"]$/\1/" |
  sort -u |
  while read -r reason; do
    ok=
    for pat in "${allowed_skips[@]}"; do
      [[ $reason =~ $pat ]] && ok=1 && break
    done
    [[ -z $ok ]] && echo "$reason"
  done)
[[ -n $unexpected ]] && fail=${fail:-"skips for a reason uroce does not document:
$unexpected"}

passed=$(grep -cE '\.\.\. ok$' "$out")
skipped=$(grep -cE "\.\.\. skipped ['\"]" "$out")
echo "---"
echo "pyverbs: ${#modules[@]} modules, $passed passed, $skipped skipped, in ${elapsed_ms} ms"
if [[ -n $fail ]]; then
  echo "FAIL: $fail"
  exit 1
fi
echo "PASS"
