// ACK riders (transport/ack_rider.h): ride_acks() over a flush's packets, and two QPs that
// exchange a ping-pong through it — one datagram each way per message once both ends showed
// they take riders, every ACK a packet of its own when either does not.
#include "transport/ack_rider.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "harness.h"
#include "transport/context.h"

namespace uroce::transport {
namespace {

using test::Crafted;
using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;

// ---- ride_acks() over hand-made queues ----

// A packet of QP kQpnA towards kQpnB at kIpB, as the QP's route stamps it.
std::unique_ptr<Crafted> packet(wire::Opcode op, uint32_t psn, size_t payload = 2,
                                bool acks_ride = true) {
  std::vector<uint8_t> bytes(payload, 0x5a);
  auto c = test::craft(op, kQpnB, psn, false, bytes);
  c->buf.dst_ip = wire::IpAddr(kIpB);
  c->buf.src_port = src_port_for_qpn(kQpnA);
  c->buf.acks_ride = acks_ride;
  return c;
}
std::unique_ptr<Crafted> ack(uint32_t psn, uint8_t syndrome = test::ack_syndrome(),
                             bool acks_ride = true) {
  auto c = test::craft_ack(kQpnB, psn, syndrome, 7);
  c->buf.dst_ip = wire::IpAddr(kIpB);
  c->buf.src_port = src_port_for_qpn(kQpnA);
  c->buf.acks_ride = acks_ride;
  return c;
}

struct Flush {
  std::vector<TxBuf*> queue, freed;
  explicit Flush(std::initializer_list<Crafted*> pkts) {
    for (Crafted* c : pkts) queue.push_back(&c->buf);
  }
  // Runs ride_acks; returns the opcodes left, in order.
  std::vector<uint8_t> run() {
    queue.resize(ride_acks(queue, freed));
    std::vector<uint8_t> ops;
    for (TxBuf* b : queue) ops.push_back(b->data[0]);
    return ops;
  }
};

constexpr uint8_t op(wire::Opcode o) {
  return static_cast<uint8_t>(o);
}

TEST(RideAcks, AnAckRidesOnTheRequestOfItsQpAndComesBackAsItWas) {
  auto a = ack(0x123456);
  auto s = packet(wire::Opcode::kRcSendOnly, 9);
  const uint32_t len = s->buf.len;
  Flush f{a.get(), s.get()};
  EXPECT_EQ(f.run(), (std::vector<uint8_t>{op(wire::Opcode::kRcSendOnly)}));
  ASSERT_EQ(f.freed, (std::vector<TxBuf*>{&a->buf}));
  EXPECT_EQ(s->buf.len, len + wire::kAckRiderBytes);
  wire::Packet p;
  ASSERT_EQ(wire::parse({s->buf.data, s->buf.len}, p), wire::ParseError::kOk);
  EXPECT_TRUE(p.bth.ext & wire::kBthExtAck);
  ASSERT_TRUE(p.has_rider);
  EXPECT_EQ(p.rider_psn, 0x123456u);
  EXPECT_EQ(p.rider_aeth.syndrome, test::ack_syndrome());
  EXPECT_EQ(p.rider_aeth.msn, 7u);
  EXPECT_EQ(p.bth.psn, 9u);
  EXPECT_EQ(p.payload.size(), 2u);  // the request's own payload, untouched
  EXPECT_EQ(p.payload[0], 0x5a);
}

TEST(RideAcks, OtherPacketsKeepTheirOrder) {
  auto w1 = packet(wire::Opcode::kRcWriteOnly, 1);
  auto a = ack(5);
  auto s = packet(wire::Opcode::kRcSendOnly, 2);
  auto other = packet(wire::Opcode::kRcSendOnly, 3);
  other->buf.dst_ip = wire::IpAddr(0x0a000009);  // another QP's peer
  Flush f{w1.get(), other.get(), a.get(), s.get()};
  // The first request of the QP carries it, wherever it lies.
  EXPECT_EQ(f.run(),
            (std::vector<uint8_t>{op(wire::Opcode::kRcWriteOnly), op(wire::Opcode::kRcSendOnly),
                                  op(wire::Opcode::kRcSendOnly)}));
  EXPECT_EQ(f.queue[0], &w1->buf);
  EXPECT_TRUE(wire::bth_ext(w1->buf.data) & wire::kBthExtAck);
  EXPECT_EQ(f.queue[1], &other->buf);
  EXPECT_EQ(f.queue[2], &s->buf);
  EXPECT_FALSE(wire::bth_ext(s->buf.data) & wire::kBthExtAck);
}

TEST(RideAcks, NothingRidesWithoutAPeerThatTakesIt) {
  auto a = ack(5, test::ack_syndrome(), /*acks_ride=*/false);
  auto s = packet(wire::Opcode::kRcSendOnly, 2, 2, /*acks_ride=*/false);
  Flush f{a.get(), s.get()};
  EXPECT_EQ(f.run().size(), 2u);
  EXPECT_TRUE(f.freed.empty());
}

TEST(RideAcks, OnlyOnARequestOfTheSameQp) {
  for (int which = 0; which < 3; ++which) {
    auto a = ack(5);
    auto s = packet(wire::Opcode::kRcSendOnly, 2);
    if (which == 0) s->buf.dst_ip = wire::IpAddr(0x0a000009);
    if (which == 1) s->buf.src_port = src_port_for_qpn(kQpnA + 1);
    if (which == 2) s->buf.data[7] ^= 1;  // another DestQP
    Flush f{a.get(), s.get()};
    EXPECT_EQ(f.run().size(), 2u) << which;
  }
}

TEST(RideAcks, NeverPastAnotherResponseOfItsQp) {
  // A READ response ahead of it: the ACK must not overtake it.
  auto r = ack(4);
  r->buf.data[0] = op(wire::Opcode::kRcReadResponseOnly);
  auto a = ack(5);
  auto s = packet(wire::Opcode::kRcSendOnly, 2);
  Flush f{r.get(), a.get(), s.get()};
  EXPECT_EQ(f.run().size(), 3u);
  // Two ACKs of the QP: neither rides (they keep their order).
  auto a1 = ack(5), a2 = ack(6);
  auto s2 = packet(wire::Opcode::kRcSendOnly, 3);
  Flush g{a1.get(), s2.get(), a2.get()};
  EXPECT_EQ(g.run().size(), 3u);
}

TEST(RideAcks, ANakKeepsItsOwnPacket) {
  auto n = ack(5, test::nak_syndrome(wire::NakCode::kPsnSequenceError));
  auto r = ack(5, test::rnr_syndrome(12));
  auto s = packet(wire::Opcode::kRcSendOnly, 2);
  Flush f{n.get(), s.get()};
  EXPECT_EQ(f.run().size(), 2u);
  Flush g{r.get(), s.get()};
  EXPECT_EQ(g.run().size(), 2u);
}

TEST(RideAcks, OnlyOnARequestThatStaysWithinTheSmallestMtu) {
  // 248 payload bytes carry one: 256 with the rider.
  auto a = ack(5);
  auto s = packet(wire::Opcode::kRcSendOnly, 2, kMaxRiderCarrierPayload);
  Flush f{a.get(), s.get()};
  EXPECT_EQ(f.run().size(), 1u);
  auto a2 = ack(5);
  auto big = packet(wire::Opcode::kRcSendOnly, 2, kMaxRiderCarrierPayload + 4);
  Flush g{a2.get(), big.get()};
  EXPECT_EQ(g.run().size(), 2u);
  // A payload by reference (TxBuf::ext) has no room behind it in the buffer.
  auto a3 = ack(5);
  auto ext = packet(wire::Opcode::kRcSendOnly, 2);
  static const uint8_t payload[64] = {};
  ext->buf.ext = payload;
  ext->buf.ext_len = sizeof payload;
  Flush h{a3.get(), ext.get()};
  EXPECT_EQ(h.run().size(), 2u);
  // A request that already carries one takes no second.
  auto a4 = ack(5), a5 = ack(6);
  a5->buf.data[7] ^= 1;  // another QP's ACK, to the same peer port and address
  auto s4 = packet(wire::Opcode::kRcSendOnly, 2);
  Flush k{a4.get(), s4.get()};
  EXPECT_EQ(k.run().size(), 1u);
  s4->buf.data[7] ^= 1;
  Flush l{a5.get(), s4.get()};
  EXPECT_EQ(l.run().size(), 2u);
}

// ---- two QPs, a ping-pong through ride_acks ----

struct PingPong {
  PingPong(bool a_rides, bool b_rides) : a(kQpnA, kIpA), b(kQpnB, kIpB) {
    a.init.ack_riders = a_rides;
    b.init.ack_riders = b_rides;
    a.rebuild();
    b.rebuild();
    a.connect(kIpB, kQpnB, 100, 200);
    b.connect(kIpA, kQpnA, 200, 100);
    abuf_key = a.buffer(abuf, 64, 0);
    bbuf_key = b.buffer(bbuf, 64, 0);
  }
  // Moves what `from` sent to `to` as one flush of the engine does: the ACKs ride first. Returns
  // the datagrams that crossed.
  size_t across(Node& from, Node& to) {
    auto pkts = test::drain(from);
    std::vector<TxBuf*> q, freed;
    for (auto& c : pkts) q.push_back(&c->buf);
    q.resize(ride_acks(q, freed));
    for (TxBuf* buf : q) {
      const wire::Packet p = test::parsed(*buf);
      if (from.init.ack_riders)
        EXPECT_TRUE(p.bth.ext & wire::kBthExtRides);
      else
        EXPECT_FALSE(p.bth.ext & (wire::kBthExtRides | wire::kBthExtAck));
      RxInfo rx;
      rx.src_ip = wire::IpAddr(from.ip);
      rx.dst_ip = wire::IpAddr(to.ip);
      to.qp->receive(p, rx, ++now);
    }
    return q.size();
  }
  uint64_t at(std::vector<uint8_t>& v, size_t off) { return reinterpret_cast<uint64_t>(&v[off]); }
  // `rounds` round trips of a 2-byte SEND; the datagrams each way, the last ACK included.
  void run(int rounds, size_t* a_to_b, size_t* b_to_a) {
    *a_to_b = *b_to_a = 0;
    ASSERT_EQ(a.qp->post_recv(test::recv_wqe(1000, at(abuf, 32), 32, abuf_key)), 0);
    ASSERT_EQ(b.qp->post_recv(test::recv_wqe(2000, at(bbuf, 32), 32, bbuf_key)), 0);
    for (int i = 0; i < rounds; ++i) {
      abuf[0] = uint8_t(i);
      abuf[1] = uint8_t(~i);
      ASSERT_EQ(a.qp->post_send(test::send_wqe(i, at(abuf, 0), 2, abuf_key), ++now), 0);
      *a_to_b += across(a, b);
      ASSERT_EQ(b.rcq.wcs.size(), size_t(i + 1));
      EXPECT_EQ(b.rcq.wcs.back().status, IBV_WC_SUCCESS);
      EXPECT_EQ(bbuf[32], uint8_t(i));
      ASSERT_EQ(b.qp->post_recv(test::recv_wqe(2000, at(bbuf, 32), 32, bbuf_key)), 0);
      std::memcpy(&bbuf[0], &bbuf[32], 2);
      ASSERT_EQ(b.qp->post_send(test::send_wqe(i, at(bbuf, 0), 2, bbuf_key), ++now), 0);
      *b_to_a += across(b, a);
      // The reply came, and so did the ACK of the ping (riding on it, or alone).
      ASSERT_EQ(a.rcq.wcs.size(), size_t(i + 1));
      EXPECT_EQ(abuf[32], uint8_t(i));
      EXPECT_EQ(abuf[33], uint8_t(~i));
      ASSERT_EQ(a.scq.wcs.size(), size_t(i + 1));
      EXPECT_EQ(a.scq.wcs.back().status, IBV_WC_SUCCESS);
      ASSERT_EQ(a.qp->post_recv(test::recv_wqe(1000, at(abuf, 32), 32, abuf_key)), 0);
    }
    // The ACK of the last reply has no request to ride on.
    *a_to_b += across(a, b);
    ASSERT_EQ(b.scq.wcs.size(), size_t(rounds));
    for (const ibv_wc& wc : a.scq.wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    for (const ibv_wc& wc : b.scq.wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  Node a, b;
  std::vector<uint8_t> abuf, bbuf;
  uint32_t abuf_key = 0, bbuf_key = 0;
  Time now = 1'000'000;
};

// The two ends agree in band, as for selective repeat: a's first ping carries its mark, so b's
// first reply already takes its ACK along, and a's ACKs ride from the second ping on.
TEST(AckRiders, APingPongMovesOneDatagramEachWayPerMessage) {
  PingPong pp(true, true);
  size_t a_to_b = 0, b_to_a = 0;
  pp.run(20, &a_to_b, &b_to_a);
  EXPECT_EQ(a_to_b, 21u);  // 20 pings, 19 ACKs riding on them, the last ACK alone
  EXPECT_EQ(b_to_a, 20u);  // 20 replies, each with the ACK of its ping
  EXPECT_EQ(pp.a.qp->counters().ack_riders_rcvd, 20u);
  EXPECT_EQ(pp.b.qp->counters().ack_riders_rcvd, 19u);
  EXPECT_EQ(pp.a.qp->counters().retransmitted_pkts + pp.b.qp->counters().retransmitted_pkts, 0u);
}

// Either end without it: every ACK is a packet of its own, and the end that has it off sends no
// mark (checked in across()).
TEST(AckRiders, APeerWithoutThemGetsEveryAckAsAPacket) {
  for (const bool a_on : {true, false}) {
    PingPong pp(a_on, !a_on);
    size_t a_to_b = 0, b_to_a = 0;
    pp.run(10, &a_to_b, &b_to_a);
    EXPECT_EQ(a_to_b, 20u) << a_on;
    EXPECT_EQ(b_to_a, 20u) << a_on;
    EXPECT_EQ(pp.a.qp->counters().ack_riders_rcvd + pp.b.qp->counters().ack_riders_rcvd, 0u);
  }
}

// A rider is the ACK packet its sender queued before the request: the QP takes it whatever becomes
// of the request — here a duplicate, answered again and not executed.
TEST(AckRiders, TheAckIsTakenEvenWhenItsRequestIsADuplicate) {
  Node n(kQpnA, kIpA);
  n.init.ack_riders = true;
  n.rebuild();
  n.connect(kIpB, kQpnB, 100, 200);
  std::vector<uint8_t> buf;
  const uint32_t key = n.buffer(buf, 64);
  ASSERT_EQ(n.qp->post_send(test::send_wqe(1, reinterpret_cast<uint64_t>(buf.data()), 2, key), 1),
            0);
  test::drain(n);
  // PSN 199: before the expected 200, a duplicate; the rider acknowledges our PSN 100.
  const uint8_t payload[2] = {1, 2};
  auto dup = test::craft(wire::Opcode::kRcSendOnly, kQpnA, 199, true, payload);
  auto rider = test::craft_ack(kQpnA, 100, test::ack_syndrome(), 1);
  wire::attach_ack_rider(dup->buf.data, dup->buf.len, rider->buf.data);
  dup->buf.len += wire::kAckRiderBytes;
  dup->pkt = test::parsed(dup->buf);
  ASSERT_TRUE(dup->pkt.has_rider);
  test::deliver(n, *dup, kIpB, 2);
  ASSERT_EQ(n.scq.wcs.size(), 1u);
  EXPECT_EQ(n.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(n.qp->counters().duplicate_request, 1u);
  EXPECT_EQ(n.qp->counters().ack_riders_rcvd, 1u);
  EXPECT_TRUE(n.rcq.wcs.empty());
}

}  // namespace
}  // namespace uroce::transport
