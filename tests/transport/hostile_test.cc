// Hostile input at a connected QP: packets for an RC or UC QP from any address but its peer's
// (RoCEv2 carries no source QPN for RC/UC; the peer is named by its IPv4 address, the UDP source
// port being free entropy, Annex A17.5.1.2) are dropped and counted, whatever they carry and at
// whatever PSN: they execute nothing, change no memory, draw no answer, and do not disturb the
// real peer's traffic.
#include <gtest/gtest.h>

#include <vector>

#include "harness.h"

namespace uroce::transport {
namespace {

using test::Node;
using wire::Opcode;

constexpr uint32_t kPeerIp = 0x0a000001, kSelfIp = 0x0a000002, kIntruderIp = 0x0a0000fe;
constexpr uint32_t kPeerQpn = 0x11, kQpn = 0x22;
constexpr uint32_t kPsn = 0x300;
constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

void connect_as(Node& n, ibv_qp_type type) {
  if (type == IBV_QPT_RC)
    n.connect(kPeerIp, kPeerQpn, 0x500, kPsn);
  else
    test::connect_uc(n, kPeerIp, kPeerQpn, 0x500, kPsn);
}

class ForeignSource : public ::testing::TestWithParam<ibv_qp_type> {};

TEST_P(ForeignSource, PacketsFromAnotherAddressAreDroppedAndCounted) {
  const ibv_qp_type type = GetParam();
  const bool rc = type == IBV_QPT_RC;
  Node n(kQpn, kSelfIp);
  connect_as(n, type);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::vector<uint8_t> mem, rbuf;
  n.buffer(mem, 4096, 0x42);
  const uint32_t rkey = n.mem.reg(n.pd, mem.data(), mem.size(), kRemoteAll);
  const uint32_t rbkey = n.buffer(rbuf, 4096, 0x42);
  ASSERT_EQ(
      n.qp->post_recv(test::recv_wqe(1, reinterpret_cast<uint64_t>(rbuf.data()), 4096, rbkey)), 0);
  const uint64_t va = reinterpret_cast<uint64_t>(mem.data());
  const std::vector<uint8_t> payload(64, 0xee);
  // Every request kind an intruder could try, at the expected PSN and around it.
  std::vector<std::unique_ptr<test::Crafted>> attacks;
  for (uint32_t psn : {kPsn, kPsn + 1, kPsn - 1}) {
    attacks.push_back(
        test::craft(rc ? Opcode::kRcSendOnly : Opcode::kUcSendOnly, kQpn, psn, true, payload));
    wire::Packet w;
    w.bth.opcode = uint8_t(rc ? Opcode::kRcWriteOnly : Opcode::kUcWriteOnly);
    w.bth.dest_qp = kQpn;
    w.bth.pkey = wire::kDefaultPkey;
    w.bth.psn = psn;
    w.bth.ack_req = true;
    w.reth = {va, rkey, 64};
    attacks.push_back(test::craft_headers(w, payload));
    if (!rc) continue;
    wire::Packet r = w;
    r.bth.opcode = uint8_t(Opcode::kRcReadRequest);
    attacks.push_back(test::craft_headers(r));
    wire::Packet f;
    f.bth.opcode = uint8_t(Opcode::kRcFetchAdd);
    f.bth.dest_qp = kQpn;
    f.bth.pkey = wire::kDefaultPkey;
    f.bth.psn = psn;
    f.atomic = {va, rkey, 1, 0};
    attacks.push_back(test::craft_headers(f));
    // Responses too: a forged ACK or NAK must not complete or fail anything of ours.
    attacks.push_back(
        test::craft_ack(kQpn, 0x500, test::nak_syndrome(wire::NakCode::kRemoteAccessError)));
  }
  Time now = 1;
  for (const auto& a : attacks) test::deliver(n, *a, kIntruderIp, now++);
  EXPECT_EQ(n.qp->counters().dropped_pkts, attacks.size());
  EXPECT_EQ(n.qp->counters().rcvd_pkts, 0u);
  EXPECT_TRUE(n.sink.sent.empty()) << "no answer to an intruder";
  EXPECT_TRUE(n.rcq.wcs.empty());
  EXPECT_TRUE(std::all_of(mem.begin(), mem.end(), [](uint8_t v) { return v == 0x42; }));
  EXPECT_TRUE(std::all_of(rbuf.begin(), rbuf.end(), [](uint8_t v) { return v == 0x42; }));
  EXPECT_NE(n.qp->state(), IBV_QPS_ERR);
  // The real peer's SEND at the expected PSN still lands: the intruder moved nothing.
  test::deliver(n,
                *test::craft(rc ? Opcode::kRcSendOnly : Opcode::kUcSendOnly, kQpn, kPsn, true,
                             std::vector<uint8_t>(10, 0x01)),
                kPeerIp, now++);
  ASSERT_EQ(n.rcq.wcs.size(), 1u);
  EXPECT_EQ(n.rcq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(n.rcq.wcs[0].byte_len, 10u);
  EXPECT_EQ(n.qp->counters().rcvd_pkts, 1u);
}

INSTANTIATE_TEST_SUITE_P(RcAndUc, ForeignSource, ::testing::Values(IBV_QPT_RC, IBV_QPT_UC),
                         [](const ::testing::TestParamInfo<ibv_qp_type>& i) {
                           return i.param == IBV_QPT_RC ? "Rc" : "Uc";
                         });

}  // namespace
}  // namespace uroce::transport
