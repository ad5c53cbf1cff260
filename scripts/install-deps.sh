#!/usr/bin/env bash
# Installs every Debian package uroce needs to build, test and run its demos. Idempotent: when all
# packages are present it does nothing. Run as root (or with sudo).
set -euo pipefail

packages=(
  build-essential cmake pkg-config clang-format ccache   # ccache: CI rebuilds only what changed (scripts/test.sh)
  libibverbs-dev ibverbs-utils rdma-core perftest   # verbs ABI headers, the unmodified test programs
  librdmacm-dev rdmacm-utils                         # rdma_cm headers; rping, ucmatose, udaddy, rdma_server…
  libdpdk-dev                                        # the DPDK port (dpdk_port/)
  libspdlog-dev libfmt-dev libcli11-dev zlib1g-dev libisal-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  tshark iproute2 procps ethtool iputils-ping python3
  qemu-system-x86 kmod cpio                          # the Linux rxe guest for the interop tests
  python3-pyverbs                                    # rdma-core's pyverbs and its test suite (tests/conformance)
  ucx-utils libucx0                                  # UCX 1.13: ucx_info, ucx_perftest, io_demo (tests/integration/ucx.sh)
  libfabric-bin libfabric1                           # libfabric 1.17: fi_info, fi_pingpong (verbs provider)
  openmpi-bin libopenmpi-dev                         # Open MPI 4.1 over UCX (tests/integration/mpi.sh)
  # MPICH 4.0 (ch4:ucx) over UCX, the same test. Open MPI stays the default `mpirun`/`mpicc`
  # (alternatives priority 50 against MPICH's 40); the tests name each by its own wrapper.
  mpich libmpich-dev
  fio qperf                                          # fio's rdma engine (bench/fio_send.sh), qperf (bench/ratios.sh)
  clang libclang-rt-14-dev                           # libFuzzer and its sanitizers (tests/fuzz, scripts/fuzz.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root (sudo $0)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer no without a prompt.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
