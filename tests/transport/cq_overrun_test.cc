// CQ overrun (IBTA C9-218, C11-37): a QP whose completion its CQ cannot take enters ERR with
// IBV_EVENT_QP_FATAL — never a completion silently lost while the QP carries on — and only the
// QPs that try to complete into the overrun CQ are affected.
#include <gtest/gtest.h>

#include <vector>

#include "harness.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr Time kSecond = 1'000'000'000;

// A CQ of `capacity` entries that overruns like the engine's (src/engine/cq.h): the completion
// that does not fit is lost, and none is taken afterwards.
class BoundedCq : public CompletionSink {
 public:
  explicit BoundedCq(size_t capacity) : capacity_(capacity) {}
  void push(const ibv_wc& wc) override {
    if (overrun_ || wcs.size() >= capacity_) {
      overrun_ = true;
      ++lost;
      return;
    }
    wcs.push_back(wc);
  }
  bool overrun() const override { return overrun_; }
  std::vector<ibv_wc> wcs;
  size_t lost = 0;

 private:
  size_t capacity_;
  bool overrun_ = false;
};

// Replaces node `n`'s QP by one completing its sends into `scq` (and receives into `rcq`, or the
// node's own recorder).
void rebuild(Node& n, CompletionSink* scq, CompletionSink* rcq = nullptr) {
  n.init.send_cq = scq;
  if (rcq != nullptr) n.init.recv_cq = rcq;
  n.rebuild();
}

// a connected to b; b has `recvs` receives of 64 bytes posted; a posts `sends` signaled SENDs
// of 64 bytes. Buffers live in the struct.
struct SendPair {
  SendPair(Node& a, Node& b, int recvs, int sends, Link& link) {
    a.connect(kIpB, 0x22, 0, 0);
    b.connect(kIpA, 0x11, 0, 0);
    skey = a.buffer(src, 64);
    dkey = b.buffer(dst, 64 * static_cast<size_t>(recvs));
    for (int i = 0; i < recvs; ++i) {
      EXPECT_EQ(b.qp->post_recv(
                    test::recv_wqe(i, reinterpret_cast<uint64_t>(dst.data() + 64 * i), 64, dkey)),
                0);
    }
    for (int i = 0; i < sends; ++i) {
      EXPECT_EQ(a.qp->post_send(test::send_wqe(i, reinterpret_cast<uint64_t>(src.data()), 64, skey),
                                link.now),
                0);
    }
  }
  std::vector<uint8_t> src, dst;
  uint32_t skey = 0, dkey = 0;
};

TEST(CqOverrun, TheQpThatLosesACompletionEntersErrWithQpFatal) {
  BoundedCq scq(2);
  Node a(0x11, kIpA), b(0x22, kIpB);
  rebuild(a, &scq);
  // Two SENDs complete into the two entries; the third completion is lost to the overrun.
  Link link(a, b);
  SendPair p(a, b, 6, 3, link);
  ASSERT_TRUE(link.run_until([&] { return a.qp->state() == IBV_QPS_ERR; }, kSecond))
      << "the QP went on after its CQ lost a completion";
  EXPECT_EQ(scq.wcs.size(), 2u);
  EXPECT_GE(scq.lost, 1u);
  ASSERT_FALSE(a.events.events.empty());
  EXPECT_EQ(a.events.events.back(), IBV_EVENT_QP_FATAL);
  // Posting now completes at once, flushed — into the CQ in error, which takes nothing.
  ASSERT_EQ(a.qp->post_send(test::send_wqe(9, reinterpret_cast<uint64_t>(p.src.data()), 64, p.skey),
                            link.now),
            0);
  EXPECT_EQ(scq.wcs.size(), 2u);
  // The receive CQ is another CQ: the flushed receives reach it (none posted on a here).
  EXPECT_TRUE(a.rcq.wcs.empty());
}

TEST(CqOverrun, QpsSharingTheCqEnterErrOnlyWhenTheyTryToCompleteIntoIt) {
  BoundedCq shared(1);
  Node a(0x11, kIpA), b(0x22, kIpB), c(0x33, kIpA);
  rebuild(a, &shared);
  rebuild(c, &shared);
  c.connect(kIpB, 0x44, 0, 0);
  Link link(a, b);
  SendPair p(a, b, 2, 2, link);
  ASSERT_TRUE(link.run_until([&] { return a.qp->state() == IBV_QPS_ERR; }, kSecond));
  EXPECT_TRUE(shared.overrun());
  EXPECT_EQ(c.qp->state(), IBV_QPS_RTS) << "c completed nothing into the CQ yet";
  EXPECT_TRUE(c.events.events.empty());
  // c's SEND is acknowledged by its peer: its completion meets the CQ in error.
  std::vector<uint8_t> cs;
  const uint32_t ckey = c.buffer(cs, 64);
  ASSERT_EQ(
      c.qp->post_send(test::send_wqe(5, reinterpret_cast<uint64_t>(cs.data()), 64, ckey), link.now),
      0);
  EXPECT_EQ(c.qp->state(), IBV_QPS_RTS);
  test::deliver(c, *test::craft_ack(0x33, 0, test::ack_syndrome(), 1), kIpB, link.now + 1);
  EXPECT_EQ(c.qp->state(), IBV_QPS_ERR);
  ASSERT_FALSE(c.events.events.empty());
  EXPECT_EQ(c.events.events.back(), IBV_EVENT_QP_FATAL);
}

TEST(CqOverrun, AReceiveCompletionLostToAnOverrunReceiveCqMovesTheResponderToErr) {
  BoundedCq rcq(1);
  Node a(0x11, kIpA), b(0x22, kIpB);
  rebuild(b, &b.scq, &rcq);
  Link link(a, b);
  SendPair p(a, b, 4, 2, link);
  ASSERT_TRUE(link.run_until([&] { return b.qp->state() == IBV_QPS_ERR; }, kSecond));
  EXPECT_EQ(rcq.wcs.size(), 1u);
  ASSERT_FALSE(b.events.events.empty());
  EXPECT_EQ(b.events.events.back(), IBV_EVENT_QP_FATAL);
}

}  // namespace
}  // namespace uroce::transport
