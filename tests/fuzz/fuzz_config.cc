// Fuzzes the configuration parsers (src/engine/config.h, transport/cc/parse.h): UROCE_DEVICES
// (addresses, netdevs and dpdk(…) bodies), UROCE_FAULTS, UROCE_CC (one spec, and per-device
// sections applied to devices) and the UROCE_PCAP pattern. Besides memory safety it checks what
// the parsers promise of what they accept: fault probabilities in [0, 1] and counts >= 1; a
// congestion-control spec that format_cc() writes back reads back to the same spec.
//
// Input: selector:u8, then the text.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"
#include "fuzz_util.h"
#include "transport/cc/parse.h"

namespace {

using uroce::fuzz::fail;

void check_spec(const uroce::FaultSpec& s) {
  for (double p : {s.loss, s.burst, s.corrupt, s.dup, s.reorder, s.queue_pmax})
    if (!(p >= 0.0 && p <= 1.0)) fail("a fault probability outside [0, 1] was accepted");
  if (s.burst_len < 1 || s.corrupt_bits < 1 || s.reorder_depth < 1)
    fail("a fault count below 1 was accepted");
}

void check_cc_round_trip(const uroce::transport::cc::CcConfig& c) {
  const std::string spec = uroce::transport::cc::format_cc(c);
  std::string err;
  auto again = uroce::transport::cc::parse_cc(spec, &err);
  if (!again) fail(("format_cc wrote a spec parse_cc refuses: " + spec + ": " + err).c_str());
  if (uroce::transport::cc::format_cc(*again) != spec) fail("format_cc/parse_cc do not round-trip");
}

const char* const kSeeds[][2] = {
    {"\x00", "uroce0=127.0.0.2"},
    {"\x00", "uroce0=127.0.0.2,uroce1=lo"},
    {"\x00",
     "uroce0=dpdk(dev=net_memif0,role=server,socket=/tmp/m.sock;ip=10.0.0.1/24;gw=10.0.0.254;"
     "mac=02:00:00:00:00:01;vlan=100;prio=3;mtu=9000;neigh=10.0.0.2@02:00:00:00:00:02;"
     "roce_v1=1;dscp=26;eal=--log-level=8)"},
    {"\x01", "loss=0.05,tx.dup=0.01,seed=7"},
    {"\x01",
     "rx.loss=0.01,tx.dup=0.02,reorder=0.05:depth=3,tx.corrupt=0.01:bits=2,burst=0.002:len=4,"
     "tx.delay=50us:jitter=100us,seed=10"},
    {"\x01", "rx.queue=10gbit:buffer=512k:kmin=5k:kmax=200k:pmax=0.01:mark=dequeue"},
    {"\x02", "dcqcn,preset=cx,rpg_ai_rate=5"},
    {"\x02", "timely,timely_t_high=500"},
    {"\x03", "dcqcn,preset=paper;uroce1:timely"},
    {"\x04", "dev=net_ring0;ip=192.168.1.1/16"},
    {"\x05", "/tmp/cap.%p.%d.pcap%%"},
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const std::string dir = uroce::fuzz::seed_dir(); !dir.empty()) {
    int n = 0;
    for (const auto& s : kSeeds) {
      std::string in = std::string(s[0], 1) + s[1];
      uroce::fuzz::write_seed(dir, "seed-" + std::to_string(n++),
                              {reinterpret_cast<const uint8_t*>(in.data()), in.size()});
    }
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string err;
  switch (data[0] % 6) {
    case 0:
      if (auto devs = uroce::parse_devices(text, &err))
        for (const uroce::DeviceConfig& d : *devs)
          if (d.name.empty()) fail("a device without a name was accepted");
      break;
    case 1:
      if (auto f = uroce::parse_faults(text, &err)) {
        check_spec(f->rx_spec());
        check_spec(f->tx);
      }
      break;
    case 2:
      if (auto c = uroce::transport::cc::parse_cc(text, &err)) check_cc_round_trip(*c);
      break;
    case 3: {
      std::vector<uroce::DeviceConfig> devs(2);
      devs[0].name = "uroce0";
      devs[1].name = "uroce1";
      if (uroce::apply_cc(text, devs, &err))
        for (const auto& d : devs) check_cc_round_trip(d.cc);
      break;
    }
    case 4: {
      uroce::DeviceConfig d;
      uroce::parse_dpdk_device(text, &d, &err);
      break;
    }
    default:
      uroce::expand_pcap_path(text, "uroce1", data[0] & 0x80);
      break;
  }
  return 0;
}
