// Micro-benchmarks of the per-packet work on the receive and transmit paths: header parsing and
// building, the ICRC, and the any-IP-ID ICRC check the socket datapath uses for foreign packets.
// The whole path above the port (post, poll, ACK handling) is bench/path_bench.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "wire/icrc.h"
#include "wire/wire.h"

namespace {

using namespace uroce::wire;

std::vector<uint8_t> make_send_only(size_t payload) {
  Packet p;
  p.bth.opcode = static_cast<uint8_t>(Opcode::kRcSendOnly);
  p.bth.dest_qp = 0x123;
  p.bth.psn = 0x55;
  p.bth.pad = pad_for(payload);
  std::vector<uint8_t> buf(opcode_info(Opcode::kRcSendOnly).header_len + payload + p.bth.pad, 0xab);
  build_headers(p, buf.data());
  return buf;
}

const Ipv4UdpFraming kFraming{0x7f000001, 0x7f000002, 0, true, 0xc123, kRoceV2UdpPort};

void BM_Parse(benchmark::State& state) {
  auto buf = make_send_only(static_cast<size_t>(state.range(0)));
  Packet p;
  for (auto _ : state) {
    benchmark::DoNotOptimize(parse(buf, p));
  }
}
BENCHMARK(BM_Parse)->Arg(0)->Arg(1024)->Arg(4096);

// Writing a packet's headers (BTH and the extended headers its opcode carries) from the parsed
// form: what the requester and responder do for every packet they send.
void BM_Build(benchmark::State& state) {
  Packet p;
  p.bth.opcode = static_cast<uint8_t>(Opcode::kRcWriteFirst);
  p.bth.dest_qp = 0x123;
  p.bth.psn = 0x55;
  p.reth.va = 0x7f0012345000;
  p.reth.rkey = 0x1234;
  p.reth.dma_len = 65536;
  uint8_t buf[64];
  for (auto _ : state) {
    benchmark::DoNotOptimize(build_headers(p, buf));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_Build);

void BM_Icrc(benchmark::State& state) {
  auto buf = make_send_only(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(icrc(kFraming, buf));
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(buf.size()));
}
BENCHMARK(BM_Icrc)->Arg(0)->Arg(1024)->Arg(4096);
// Which CRC routine the figures are for: UROCE_ICRC's, as in the library (transport/wire/icrc.cc
// chooses it by default).
const bool kIcrcContext = [] {
  const char* v = std::getenv("UROCE_ICRC");
  const std::optional<IcrcRoutine> r = parse_icrc_routine(v ? v : "");
  if (!r || !select_icrc_routine(*r)) {
    std::fprintf(stderr, "wire_bench: UROCE_ICRC '%s' is not a routine this host has\n", v);
    std::exit(2);
  }
  benchmark::AddCustomContext("icrc", icrc_implementation());
  return true;
}();

// A packet from a peer whose IP ID is not 0 (as Linux rxe sends): the check must solve for it.
void BM_IcrcSomeIpId(benchmark::State& state) {
  auto buf = make_send_only(static_cast<size_t>(state.range(0)));
  Ipv4UdpFraming sent = kFraming;
  sent.ip_id = 0x4d2;
  const uint32_t wire_icrc = icrc(sent, buf);
  uint16_t id = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(icrc_matches_some_ip_id(kFraming, buf, wire_icrc, &id));
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(buf.size()));
}
BENCHMARK(BM_IcrcSomeIpId)->Arg(0)->Arg(1024)->Arg(4096);

}  // namespace
