// transport/recv_queue.{h,cc}: the receive queue's posting side (any thread, its own lock) and
// consuming side (the device lock's holder): FIFO across both, capacity freed before the
// completion, the gates that stand for the QP's state (RESET refuses, ERR flushes in posting
// order). The threaded cases are in tests/engine/posting_test.cc (built under ThreadSanitizer).
#include "transport/recv_queue.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <mutex>
#include <vector>

namespace uroce::transport {
namespace {

RecvWqe wqe(uint64_t wr_id) {
  RecvWqe w;
  w.wr_id = wr_id;
  w.num_sge = 1;
  w.sge[0] = {0x1000 + wr_id, 64, 7};
  return w;
}

// A thread-safe sink, like the engine's CQ.
class Sink : public CompletionSink {
 public:
  void push(const ibv_wc& wc) override {
    std::lock_guard<std::mutex> g(mu_);
    wcs_.push_back(wc);
  }
  void push(const ibv_wc& wc, bool) override { push(wc); }
  bool overrun() const override { return false; }
  std::vector<ibv_wc> take() {
    std::lock_guard<std::mutex> g(mu_);
    return std::exchange(wcs_, {});
  }

 private:
  std::mutex mu_;
  std::vector<ibv_wc> wcs_;
};

TEST(RecvQueue, PostedWqesAreConsumedInOrderAcrossRefills) {
  RecvQueue q(8);
  EXPECT_TRUE(q.empty());
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_EQ(q.post(wqe(i)), 0);
  ASSERT_FALSE(q.empty());
  EXPECT_EQ(q.front().wr_id, 1u);
  EXPECT_EQ(q.front().sge[0].addr, 0x1001u);
  q.pop_front();
  // Posted while the consumer still works on what it took in: served after it, in order.
  ASSERT_EQ(q.post(wqe(4)), 0);
  std::vector<uint64_t> seen;
  while (!q.empty()) {
    seen.push_back(q.front().wr_id);
    q.pop_front();
  }
  EXPECT_EQ(seen, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(q.size(), 0u);
}

TEST(RecvQueue, CapacityCountsBothSidesAndIsFreedAtPop) {
  RecvQueue q(2);
  ASSERT_EQ(q.post(wqe(1)), 0);
  ASSERT_FALSE(q.empty());  // taken into the consumer's ring: still outstanding
  ASSERT_EQ(q.post(wqe(2)), 0);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.post(wqe(3)), ENOMEM);
  // The room is free as soon as the consumer pops, before it reports the completion: an
  // application reposting on seeing that completion never finds the queue full.
  q.pop_front();
  EXPECT_EQ(q.post(wqe(3)), 0);
  EXPECT_EQ(q.post(wqe(4)), ENOMEM);
}

TEST(RecvQueue, SetCapacityNeverDropsOutstandingWqes) {
  RecvQueue q(4);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(q.post(wqe(i)), 0);
  EXPECT_EQ(q.set_capacity(2), EINVAL);
  EXPECT_EQ(q.capacity(), 4u);
  EXPECT_EQ(q.set_capacity(3), 0);
  EXPECT_EQ(q.post(wqe(9)), ENOMEM);
  EXPECT_EQ(q.set_capacity(16), 0);
  EXPECT_EQ(q.post(wqe(9)), 0);
}

TEST(RecvQueue, GatesFollowTheQpState) {
  Sink cq;
  RecvQueue q(8, &cq, 0x42, RecvQueue::Gate::kClosed);
  EXPECT_EQ(q.post(wqe(1)), EINVAL) << "RESET: ibv_post_recv(3) refuses";
  q.open();  // INIT
  ASSERT_EQ(q.post(wqe(1)), 0);
  ASSERT_FALSE(q.empty());       // one in the consumer's ring…
  ASSERT_EQ(q.post(wqe(2)), 0);  // …and one still on the posting side
  q.flush(&cq);                  // ERR: both complete flushed, oldest first
  ASSERT_EQ(q.post(wqe(3)), 0) << "ERR: a post completes at once, flushed (IBTA 10.8.3.1)";
  const std::vector<ibv_wc> wcs = cq.take();
  ASSERT_EQ(wcs.size(), 3u);
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wcs[i].opcode, IBV_WC_RECV);
    EXPECT_EQ(wcs[i].qp_num, 0x42u);
  }
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
  q.reset();  // RESET: refuses again, empty, nothing completes
  EXPECT_EQ(q.post(wqe(4)), EINVAL);
  q.open();
  ASSERT_EQ(q.post(wqe(5)), 0);
  q.reset();
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(cq.take().empty());
}

TEST(RecvQueue, PushLocalBypassesGateAndCapacity) {
  // An SRQ hands its oldest WQE to the QP that takes it (Srq::take).
  RecvQueue q(0, nullptr, 0, RecvQueue::Gate::kClosed);
  q.push_local() = wqe(7);
  ASSERT_FALSE(q.empty());
  EXPECT_EQ(q.front().wr_id, 7u);
  EXPECT_EQ(q.size(), 1u);
  q.pop_front();
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace uroce::transport
