// Fuzzes the device's receive pipeline (src/engine/datapath.h) over a fake Port: the frames a
// port hands up go through fault injection, the length checks, the ICRC (exact, or "some IP ID"
// as for a kernel socket), the parser, and on into the QPs of qp_world.h, whose answers go back
// out through the transmit side (ICRC appended, transmit faults) to the fake port. A record's
// flag asks the harness to give the frame a valid ICRC, so the fuzzer reaches past that check.
//
// Input: config:u8 (bits 0-1: receive faults, transmit faults; bit 2: the port sees the IP header
// (PortCaps::exact_icrc)), then records:
//   flags:u8 role:u8 ip_id:u16 len:u16 bytes
//   flags: 1 valid ICRC, 2 IP ID known, 4 truncated, 8 from a foreign address, 16 marked CE,
//          32 the burst ends here (the pipeline runs)
//   role: the QP whose QPN replaces DestQP (>= QpWorld::kRoles: as given)
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/datapath.h"
#include "fuzz_util.h"
#include "qp_world.h"
#include "wire/icrc.h"

using uroce::fuzz::QpWorld;
using uroce::fuzz::Reader;
using uroce::fuzz::Writer;
namespace transport = uroce::transport;
namespace wire = uroce::wire;

namespace {

constexpr uint16_t kSrcPort = 0xc000;

// A port of fixed frames: rx_burst() hands up what the harness queued, once; transmit buffers
// come from a ring and go nowhere.
class FakePort : public uroce::Port {
 public:
  explicit FakePort(bool exact) {
    caps_.exact_icrc = exact;
    static auto* bufs = new transport::TxBuf[kRing];  // one ring per process (one port at a time)
    for (size_t i = 0; i < kRing; ++i) free_.push_back(&bufs[i]);
  }
  const uroce::PortCaps& caps() const override { return caps_; }
  wire::IpAddr ip() const override { return wire::IpAddr(QpWorld::kLocalIp); }
  std::string describe() const override { return "fuzz"; }
  std::span<const uroce::RxFrame> rx_burst() override {
    handed_.swap(queued_);
    held_.swap(queued_bytes_);
    queued_.clear();
    queued_bytes_.clear();
    return handed_;
  }
  transport::TxBuf* tx_alloc() override {
    if (free_.empty()) return nullptr;
    transport::TxBuf* b = free_.back();
    free_.pop_back();
    return b;
  }
  void tx_free(transport::TxBuf* b) override { free_.push_back(b); }
  size_t tx_burst(std::span<transport::TxBuf* const> bufs) override {
    for (transport::TxBuf* b : bufs) free_.push_back(b);
    return bufs.size();
  }

  void queue(std::vector<uint8_t> bytes, uroce::RxFrame meta) {
    queued_bytes_.push_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes)));
    meta.data = queued_bytes_.back()->data();
    meta.len = uint32_t(queued_bytes_.back()->size());
    queued_.push_back(meta);
  }

 private:
  static constexpr size_t kRing = 16;
  uroce::PortCaps caps_;
  std::vector<transport::TxBuf*> free_;
  std::vector<uroce::RxFrame> queued_, handed_;
  // Each frame's bytes on the heap, exactly its length (ASan sees any overread).
  std::vector<std::unique_ptr<std::vector<uint8_t>>> queued_bytes_, held_;
};

uroce::FaultSpec faulty() {
  uroce::FaultSpec s;
  s.dup = 0.1;
  s.reorder = 0.1;
  s.corrupt = 0.05;
  s.corrupt_bits = 2;
  s.delay_ns = 10'000;
  s.jitter_ns = 20'000;
  s.burst = 0.01;
  return s;
}

void write_seeds(const std::string& dir) {
  using O = wire::Opcode;
  int n = 0;
  auto rec = [](Writer& w, uint8_t flags, int role, const wire::Packet& p, size_t payload,
                bool bad_icrc = false) {
    uint8_t buf[transport::kMaxIbPacket + 4] = {};
    const size_t len = wire::build_headers(p, buf) + payload + 4;
    if (bad_icrc) flags &= ~1;
    w.u8(flags).u8(uint8_t(role)).u16(0x1234).u16(uint16_t(len)).bytes({buf, len});
  };
  wire::Packet send;
  send.bth.opcode = uint8_t(O::kRcSendOnly);
  send.bth.pkey = wire::kDefaultPkey;
  send.bth.psn = QpWorld::kRqPsn;
  send.bth.ack_req = true;
  wire::Packet read = send;
  read.bth.opcode = uint8_t(O::kRcReadRequest);
  read.reth = {QpWorld::kMemBase, QpWorld::kKeyRw, 2000};
  wire::Packet ud = send;
  ud.bth.opcode = uint8_t(O::kUdSendOnly);
  ud.deth = {QpWorld::kQkey, 0x55};
  wire::Packet ack = send;
  ack.bth.opcode = uint8_t(O::kRcAcknowledge);
  ack.bth.psn = QpWorld::kSqPsn + 7;
  ack.aeth.syndrome = uroce::transport::test::ack_syndrome();
  for (uint8_t config = 0; config < 8; ++config) {
    Writer w;
    w.u8(config);
    const uint8_t known = (config & 4) ? 2 : 0;
    rec(w, 1 | known, QpWorld::kRcRts, send, 64);
    rec(w, 1 | known | 32, QpWorld::kRcRts, read, 0);
    rec(w, 1 | known | 16, QpWorld::kUdRts, ud, 100);
    rec(w, 1 | known | 32, QpWorld::kRcReads, ack, 0);
    rec(w, known | 32, QpWorld::kRcRts, send, 64, /*bad_icrc=*/true);
    uroce::fuzz::write_seed(dir, "seed-" + std::to_string(n++), w.out);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const std::string dir = uroce::fuzz::seed_dir(); !dir.empty()) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  const uint8_t config = r.u8();
  uroce::DatapathOptions opt;
  opt.faults.seed = config >> 3;
  if (config & 1) {
    opt.faults.rx = faulty();
    opt.faults.rx_loss = 0.05;
  }
  if (config & 2) {
    opt.faults.tx = faulty();
    opt.faults.tx.loss = 0.05;
  }
  auto port = std::make_unique<FakePort>(config & 4);
  FakePort* fake = port.get();
  uroce::DeviceCounters counters;
  std::string err;
  auto dp = uroce::Datapath::open(std::move(port), opt, counters, &err);
  if (!dp) uroce::fuzz::fail("Datapath::open");
  QpWorld w(*dp, nullptr);
  auto run = [&] {
    w.dispatch().receive(dp->rx_burst(w.now), w.now);
    w.progress();
    w.check_and_clear();
    w.now += 20'000;
  };
  while (!r.empty()) {
    const uint8_t flags = r.u8();
    const int role = r.u8();
    const uint16_t ip_id = r.u16();
    const size_t len = r.u16();
    auto b = r.bytes(len);
    std::vector<uint8_t> bytes(b.begin(), b.end());
    if (role < QpWorld::kRoles && bytes.size() >= wire::kBthBytes) {
      const uint32_t q = QpWorld::qpn(role);
      bytes[5] = uint8_t(q >> 16);
      bytes[6] = uint8_t(q >> 8);
      bytes[7] = uint8_t(q);
    }
    uroce::RxFrame meta;
    meta.src_ip = wire::IpAddr((flags & 8) ? QpWorld::kForeignIp : QpWorld::kPeerIp);
    meta.dst_ip = wire::IpAddr(QpWorld::kLocalIp);
    meta.src_port = kSrcPort;
    meta.dst_port = wire::kRoceV2UdpPort;
    meta.tos = (flags & 16) ? transport::kEcnCe : transport::kEcnNotEct;
    meta.truncated = flags & 4;
    meta.ip_id_known = (config & 4) && (flags & 2);
    meta.ip_id = ip_id;
    meta.dont_fragment = true;
    if ((flags & 1) && bytes.size() >= wire::kIcrcBytes) {
      wire::Ipv4UdpFraming f;
      f.src_ip = meta.src_ip.v4();
      f.dst_ip = meta.dst_ip.v4();
      f.src_port = meta.src_port;
      f.dst_port = meta.dst_port;
      f.ip_id = meta.ip_id_known ? ip_id : 0;
      const size_t ib = bytes.size() - wire::kIcrcBytes;
      wire::store_le32(bytes.data() + ib, wire::icrc(f, {bytes.data(), ib}));
    }
    fake->queue(std::move(bytes), meta);
    if (flags & 32) run();
  }
  run();
  // Let the delay lines and the QPs' timers run out.
  for (int i = 0; i < 32; ++i) {
    w.now += 1'000'000;
    run();
  }
  w.settle();
  return 0;
}
