// Fuzzes the transport's receive path: parsed packets dispatched into QPs in every state
// (qp_world.h), interleaved with clock steps and application calls. The ICRC layer is bypassed
// (fuzz_datapath.cc covers it), so every input reaches the parser and the transport.
//
// Input: a sequence of records (QpWorld::record):
//   0b00rfTTTT len:u16 bytes   a packet for role T (15: DestQP as in the bytes), from a foreign
//                              address when f, marked CE when r
//   0b01rfTTTT len:u16 bytes   the same, then the timers and pumps run
//   0b10xxxxxx step:u16        the clock moves step microseconds
//   0b11xxxAAA …               application action A (QpWorld::app_action)
// After the last record the clock runs through every deadline (retransmissions, RNR waits,
// retry exhaustion). Invariants besides ASan/UBSan: completions name our QPs and valid statuses.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qp_world.h"

using uroce::fuzz::QpWorld;
using uroce::fuzz::Reader;
using uroce::fuzz::Writer;
namespace wire = uroce::wire;

namespace {

wire::Packet hdr(wire::Opcode op, uint32_t psn) {
  wire::Packet p;
  p.bth.opcode = static_cast<uint8_t>(op);
  p.bth.migreq = true;
  p.bth.pkey = wire::kDefaultPkey;
  p.bth.psn = psn;
  p.bth.ack_req = true;
  return p;
}

wire::Packet with_reth(wire::Packet p, uint64_t va, uint32_t key, uint32_t len) {
  p.reth = {va, key, len};
  return p;
}

void write_seeds(const std::string& dir) {
  using O = wire::Opcode;
  const std::vector<uint8_t> p64(64, 0xab), p1k(1024, 0xcd), p100(100, 0x11);
  int n = 0;
  auto save = [&](const Writer& w) {
    uroce::fuzz::write_seed(dir, "seed-" + std::to_string(n++), w.out);
  };
  auto one = [&](int role, const wire::Packet& p, std::span<const uint8_t> pay = {}) {
    Writer w;
    QpWorld::packet_record(w, role, p, pay, 0x40);
    save(w);
  };
  const uint32_t rq = QpWorld::kRqPsn, sq = QpWorld::kSqPsn;
  const uint64_t base = QpWorld::kMemBase;
  for (int role : {QpWorld::kRcReset, QpWorld::kRcInit, QpWorld::kRcRtr, QpWorld::kRcRts,
                   QpWorld::kRcSqd, QpWorld::kRcErr, QpWorld::kRcSrq}) {
    one(role, hdr(O::kRcSendOnly, rq), p64);
    one(role, with_reth(hdr(O::kRcWriteOnly, rq), base, QpWorld::kKeyRw, 64), p64);
    one(role, with_reth(hdr(O::kRcWriteOnly, rq), base + QpWorld::kRwBytes, QpWorld::kKeyRo, 64),
        p64);
    one(role, with_reth(hdr(O::kRcReadRequest, rq), base, QpWorld::kKeyRw, 2048));
    wire::Packet cas = hdr(O::kRcCompareSwap, rq);
    cas.atomic = {base + 8, QpWorld::kKeyRw, 2, 1};
    one(role, cas);
    wire::Packet faa = hdr(O::kRcFetchAdd, rq);
    faa.atomic = {base + 16, QpWorld::kKeyRw, 3, 0};
    one(role, faa);
    Writer w;  // a three-packet SEND, a duplicate of its first packet, one out of sequence
    QpWorld::packet_record(w, role, hdr(O::kRcSendFirst, rq), p1k);
    QpWorld::packet_record(w, role, hdr(O::kRcSendMiddle, rq + 1), p1k);
    QpWorld::packet_record(w, role, hdr(O::kRcSendLastImm, rq + 2), p100, 0x40);
    QpWorld::packet_record(w, role, hdr(O::kRcSendFirst, rq), p1k, 0x40);
    QpWorld::packet_record(w, role, hdr(O::kRcSendOnly, rq + 9), p64, 0x40);
    save(w);
    wire::Packet inv = hdr(O::kRcSendOnlyInv, rq);
    inv.ieth_rkey = QpWorld::kKeyRw;
    one(role, inv, p64);
  }
  // The on-demand region: each of its pages (mapped, a hole, read-only, mapped) written, read
  // and reached by an atomic, and a WRITE across the hole.
  for (uint64_t page = 0; page < QpWorld::kOdpPages; ++page) {
    const uint64_t va = QpWorld::kOdpBase + page * QpWorld::kPage;
    one(QpWorld::kRcRts, with_reth(hdr(O::kRcWriteOnly, rq), va, QpWorld::kKeyOdp, 64), p64);
    one(QpWorld::kRcRts, with_reth(hdr(O::kRcReadRequest, rq), va, QpWorld::kKeyOdp, 2048));
    wire::Packet faa = hdr(O::kRcFetchAdd, rq);
    faa.atomic = {va + 8, QpWorld::kKeyOdp, 3, 0};
    one(QpWorld::kRcRts, faa);
  }
  one(QpWorld::kRcRts,
      with_reth(hdr(O::kRcWriteOnly, rq), QpWorld::kOdpBase + QpWorld::kPage - 512,
                QpWorld::kKeyOdp, 1024),
      p1k);
  one(QpWorld::kUcRts, hdr(O::kUcSendOnly, rq), p64);
  one(QpWorld::kUcRts, with_reth(hdr(O::kUcWriteOnlyImm, rq), base, QpWorld::kKeyRw, 64), p64);
  {
    Writer w;
    QpWorld::packet_record(w, QpWorld::kUcRts, hdr(O::kUcSendFirst, rq), p1k);
    QpWorld::packet_record(w, QpWorld::kUcRts, hdr(O::kUcSendLast, rq + 2), p100, 0x40);
    save(w);
  }
  wire::Packet ud = hdr(O::kUdSendOnly, 0);
  ud.deth = {QpWorld::kQkey, 0x333};
  one(QpWorld::kUdRts, ud, p64);
  // The requester: responses to kRcReads' READ, atomics, WRITE and SEND, and NAKs.
  {
    wire::Packet f = hdr(O::kRcReadResponseFirst, sq), m = hdr(O::kRcReadResponseMiddle, sq + 1),
                 l = hdr(O::kRcReadResponseLast, sq + 2);
    f.aeth.syndrome = l.aeth.syndrome = uroce::transport::test::ack_syndrome();
    const std::vector<uint8_t> last(QpWorld::kReadBytes - 2048, 0x22);
    wire::Packet a1 = hdr(O::kRcAtomicAcknowledge, sq + 3), a2 = a1;
    a2.bth.psn = sq + 4;
    a1.aeth.syndrome = a2.aeth.syndrome = f.aeth.syndrome;
    a1.atomic_ack = 1;
    a2.atomic_ack = 7;
    wire::Packet ack = hdr(O::kRcAcknowledge, sq + 7);
    ack.aeth.syndrome = f.aeth.syndrome;
    Writer w;
    QpWorld::packet_record(w, QpWorld::kRcReads, f, p1k);
    QpWorld::packet_record(w, QpWorld::kRcReads, m, p1k);
    QpWorld::packet_record(w, QpWorld::kRcReads, l, last, 0x40);
    QpWorld::packet_record(w, QpWorld::kRcReads, a1, {}, 0x40);
    QpWorld::packet_record(w, QpWorld::kRcReads, a2, {}, 0x40);
    QpWorld::packet_record(w, QpWorld::kRcReads, ack, {}, 0x40);
    save(w);
    one(QpWorld::kRcReads, f, p1k);
    wire::Packet seq = hdr(O::kRcAcknowledge, sq + 5);
    seq.aeth.syndrome = uroce::transport::test::nak_syndrome(wire::NakCode::kPsnSequenceError);
    one(QpWorld::kRcReads, seq);
    wire::Packet rnr = hdr(O::kRcAcknowledge, sq);
    rnr.aeth.syndrome = uroce::transport::test::rnr_syndrome(3);
    one(QpWorld::kRcReads, rnr);
    wire::Packet acc = hdr(O::kRcAcknowledge, sq);
    acc.aeth.syndrome = uroce::transport::test::nak_syndrome(wire::NakCode::kRemoteAccessError);
    one(QpWorld::kRcReads, acc);
    one(QpWorld::kRcRnr, ack);
    wire::Packet ack0 = ack;
    ack0.bth.psn = sq;
    one(QpWorld::kRcRnr, ack0);
    Writer t;  // the RNR wait runs out, then the retry is ACKed
    t.u8(0x80).u16(200);
    QpWorld::packet_record(t, QpWorld::kRcRnr, ack0, {}, 0x40);
    save(t);
  }
  // XRC: requests naming the receive QP's SRQ, another domain's, none; a three-packet SEND whose
  // last packet names another SRQ; responses to the send QP.
  {
    auto xrc = [](O op, uint32_t psn, uint32_t srqn) {
      wire::Packet p = hdr(op, psn);
      p.xrc_srqn = srqn;
      return p;
    };
    for (uint32_t srqn : {QpWorld::kXrcSrq, QpWorld::kForeignSrq, 0x999u}) {
      one(QpWorld::kXrcRecv, xrc(O(0xa4), rq, srqn), p64);  // XRC SEND ONLY
      one(QpWorld::kXrcRecv, with_reth(xrc(O::kXrcWriteOnly, rq, srqn), base, QpWorld::kKeyRw, 64),
          p64);
      one(QpWorld::kXrcRecv, with_reth(xrc(O(0xac), rq, srqn), base, QpWorld::kKeyRw, 2048));
      wire::Packet cas = xrc(O(0xb3), rq, srqn);
      cas.atomic = {base + 8, QpWorld::kKeyRw, 2, 1};
      one(QpWorld::kXrcRecv, cas);
    }
    Writer w;
    QpWorld::packet_record(w, QpWorld::kXrcRecv, xrc(O::kXrcSendFirst, rq, QpWorld::kXrcSrq), p1k);
    QpWorld::packet_record(w, QpWorld::kXrcRecv, xrc(O::kXrcSendMiddle, rq + 1, QpWorld::kXrcSrq),
                           p1k);
    QpWorld::packet_record(w, QpWorld::kXrcRecv, xrc(O(0xa2), rq + 2, QpWorld::kForeignSrq), p100,
                           0x40);
    save(w);
    // RC opcodes to an XRC QP and XRC opcodes to an RC QP: wrong service, dropped.
    one(QpWorld::kXrcRecv, hdr(O::kRcSendOnly, rq), p64);
    one(QpWorld::kRcRts, xrc(O(0xa4), rq, QpWorld::kXrcSrq), p64);
    wire::Packet ack = hdr(O::kXrcAcknowledge, sq);
    ack.aeth.syndrome = uroce::transport::test::ack_syndrome();
    one(QpWorld::kXrcSend, ack);
    one(QpWorld::kXrcRecv, ack);
    Writer a;  // the send QP posts each kind of operation, then an ACK for them arrives
    for (uint8_t op = 0; op < 8; ++op)
      a.u8(0xc1).u8(QpWorld::kXrcSend).u8(op).u16(1500).u8(2).u16(0);
    QpWorld::packet_record(a, QpWorld::kXrcSend, ack, {}, 0x40);
    save(a);
  }
  one(QpWorld::kRcRts, wire::cnp_packet(0));
  {
    Writer w;  // application actions: sends of each kind, a receive, a reset and reconnect
    for (uint8_t op = 0; op < 8; ++op) w.u8(0xc1).u8(QpWorld::kRcRts).u8(op).u16(1500).u8(2).u16(0);
    w.u8(0xc0).u8(QpWorld::kUdRts).u16(2000);
    w.u8(0xc1).u8(QpWorld::kUdRts).u8(0).u16(500).u8(2).u16(0);
    for (uint8_t s : {0, 1, 2, 3}) w.u8(0xc2).u8(QpWorld::kRcErr).u8(s);
    w.u8(0xc5).u8(0).u8(1).u8(0xc7).u8(0).u8(5);
    save(w);
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
  uroce::fuzz::RingSink sink;
  QpWorld w(sink, &sink);
  Reader r(data, size);
  while (!r.empty()) w.record(r);
  w.settle();
  return 0;
}
