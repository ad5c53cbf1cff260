// The application's verbs never wait behind the engine (docs/architecture.md, "Threads, locking,
// progress"): receive posts take only the receive queue's own lock (transport/recv_queue.h), and a
// CQ poll's progress pass never waits for a device lock another thread holds. Each "never waits"
// test holds the device lock on the test thread, as a receive pass would, and requires the call on
// another thread to return while it is held; were the call to take the lock, it would only return
// after the test gave up waiting for it (a deadlock, reported as a failure, not a timing bet).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "rc_side.h"
#include "test_util.h"
#include "transport/recv_queue.h"

namespace uroce {
namespace {

using namespace std::chrono_literals;
using test::config;
using test::connect;
using test::loopback;
using test::Side;

// Generous: a loaded CI machine may take a while to run the other thread at all. Only the
// failing case waits this long.
constexpr auto kReturnsWithin = 60s;

transport::RecvWqe recv_wqe(const Side& s, uint64_t wr_id, size_t offset, uint32_t len) {
  transport::RecvWqe w;
  w.wr_id = wr_id;
  w.num_sge = 1;
  w.sge[0] = {reinterpret_cast<uintptr_t>(s.buf.data() + offset), len, s.lkey};
  return w;
}

// Runs `call` on another thread while this one holds `dev`'s lock; true when it returned then.
template <typename F>
bool returns_while_device_locked(Device& dev, F call) {
  std::unique_lock<std::mutex> held(dev.lock());
  auto done = std::async(std::launch::async, call);
  const bool returned = done.wait_for(kReturnsWithin) == std::future_status::ready;
  held.unlock();
  done.wait();  // it finishes either way once the lock is free
  return returned;
}

TEST(PostingTest, PostRecvNeverWaitsForTheDeviceLock) {
  Side a, b;
  ASSERT_TRUE(a.setup(config("pa", loopback(49, 1, 1)), 4096));
  ASSERT_TRUE(b.setup(config("pb", loopback(49, 1, 2)), 4096));
  connect(a, b);
  connect(b, a);
  EXPECT_TRUE(returns_while_device_locked(*b.dev, [&] {
    const transport::RecvWqe w = recv_wqe(b, 7, 0, 64);
    size_t bad = 0;
    EXPECT_EQ(b.dev->post_recv(b.qp, &w, 1, &bad), 0);
  })) << "ibv_post_recv waited for the device lock";
  // And the WQE is there: a SEND lands in it.
  transport::SendWqe s;
  s.wr_id = 1;
  s.opcode = IBV_WR_SEND;
  s.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  s.inline_len = 5;
  std::memcpy(s.inline_data.data(), "hello", 5);
  size_t bad = 0;
  ASSERT_EQ(a.dev->post_send(a.qp, &s, 1, &bad), 0);
  auto wc = test::poll_n(*b.rcq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(std::memcmp(b.buf.data(), "hello", 5), 0);
}

TEST(PostingTest, CqPollProgressNeverWaitsForTheDeviceLock) {
  // An application thread busy-polling an empty CQ runs a receive pass (Device::poll_progress):
  // the guard it pushes and the ACKs it releases must not wait for a pass another thread runs.
  Side a;
  ASSERT_TRUE(a.setup(config("pc", loopback(49, 2, 1)), 4096));
  for (int round = 0; round < 3; ++round) {
    EXPECT_TRUE(returns_while_device_locked(*a.dev,
                                            [&] {
                                              for (int i = 0; i < 100; ++i) a.dev->poll_progress();
                                            }))
        << "a CQ poll waited for the device lock (round " << round << ")";
  }
}

TEST(PostingTest, ReceiveQueueProducerAndConsumerThreads) {
  // The consumer (standing for the responder under the device lock) drains while an application
  // thread reposts as fast as it can: every WQE is consumed once, in posting order, and a post
  // never finds the queue full when the consumer has freed room (it frees it before reporting).
  constexpr uint64_t kTotal = 100000;
  constexpr uint32_t kCapacity = 16;
  transport::RecvQueue q(kCapacity);
  std::atomic<uint64_t> consumed{0};
  std::thread producer([&] {
    for (uint64_t i = 0; i < kTotal;) {
      if (i - consumed.load(std::memory_order_acquire) >= kCapacity) {
        std::this_thread::yield();
        continue;
      }
      transport::RecvWqe w;
      w.wr_id = i;
      w.num_sge = 1;
      w.sge[0].addr = 0x1000 + i;
      ASSERT_EQ(q.post(w), 0) << "posted " << i << ", consumed " << consumed.load();
      ++i;
    }
  });
  uint64_t next = 0;
  while (next < kTotal) {
    if (q.empty()) {
      std::this_thread::yield();
      continue;
    }
    ASSERT_EQ(q.front().wr_id, next);
    ASSERT_EQ(q.front().sge[0].addr, 0x1000 + next);
    q.pop_front();
    consumed.store(++next, std::memory_order_release);
  }
  producer.join();
  EXPECT_TRUE(q.empty());
}

TEST(PostingTest, ReceiverRepostsFromAnotherThreadWhileSenderStreams) {
  // The fio verb=send pattern, with rnr_retry_count 0 (one RNR NAK fails the sender): the sender
  // streams SENDs at full rate into a receive queue the receiver keeps full from another thread,
  // reposting each buffer as soon as its completion comes. The sender keeps no more SENDs
  // outstanding than the receiver has posted (credits granted after each post returns), so an
  // RNR NAK can only mean that uroce missed a WQE the application had posted.
  constexpr size_t kSlots = 16, kLen = 512, kMsgs = 3000;
  Side a, b;
  ASSERT_TRUE(a.setup(config("pd", loopback(49, 3, 1)), kSlots * kLen));
  ASSERT_TRUE(b.setup(config("pe", loopback(49, 3, 2)), kSlots * kLen));
  connect(a, b, 14, /*rnr_retry=*/0);
  connect(b, a, 14, /*rnr_retry=*/0);
  std::atomic<size_t> credits{0};
  std::atomic<bool> failed{false};
  for (size_t i = 0; i < kSlots; ++i) {
    const transport::RecvWqe w = recv_wqe(b, i, i * kLen, kLen);
    size_t bad = 0;
    ASSERT_EQ(b.dev->post_recv(b.qp, &w, 1, &bad), 0);
    credits.fetch_add(1);
  }
  std::thread receiver([&] {
    size_t got = 0, posted = kSlots;
    ibv_wc wc[16];
    const auto give_up = std::chrono::steady_clock::now() + kReturnsWithin;
    while (got < kMsgs && !failed && std::chrono::steady_clock::now() < give_up) {
      int n = b.rcq->poll(16, wc);
      if (n == 0) {
        b.dev->poll_progress();  // as ibv_poll_cq does on an empty CQ
        continue;
      }
      for (int i = 0; i < n; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != kLen) {
          ADD_FAILURE() << "receive " << got << ": status " << wc[i].status;
          failed = true;
          return;
        }
        const size_t slot = wc[i].wr_id % kSlots;
        // Each message carries its sequence number in its first bytes.
        uint64_t seq = 0;
        std::memcpy(&seq, b.buf.data() + slot * kLen, sizeof seq);
        if (seq != got) {
          ADD_FAILURE() << "message " << got << " arrived as " << seq;
          failed = true;
          return;
        }
        ++got;
        if (posted < kMsgs) {
          const transport::RecvWqe w = recv_wqe(b, wc[i].wr_id + kSlots, slot * kLen, kLen);
          size_t bad = 0;
          if (b.dev->post_recv(b.qp, &w, 1, &bad) != 0) {
            ADD_FAILURE() << "repost failed";
            failed = true;
            return;
          }
          ++posted;
          credits.fetch_add(1);
        }
      }
    }
    if (got < kMsgs) failed = true;
  });
  std::vector<uint8_t> payload(kLen);
  size_t sent = 0, completed = 0;
  ibv_wc wc[16];
  while (completed < kMsgs && !failed) {
    // Send while the receiver has a buffer for it (its credits) and the send queue has room.
    while (sent < kMsgs && sent < credits.load() && sent - completed < 64) {
      transport::SendWqe s;
      s.wr_id = sent;
      s.opcode = IBV_WR_SEND;
      s.send_flags = IBV_SEND_SIGNALED;
      s.num_sge = 1;
      const size_t slot = sent % kSlots;
      std::memcpy(a.buf.data() + slot * kLen, &sent, sizeof sent);
      s.sge[0] = {reinterpret_cast<uintptr_t>(a.buf.data() + slot * kLen), kLen, a.lkey};
      size_t bad = 0;
      if (a.dev->post_send(a.qp, &s, 1, &bad) != 0) {
        ADD_FAILURE() << "post_send " << sent;
        failed = true;
        break;
      }
      ++sent;
    }
    int n = a.scq->poll(16, wc);
    if (n == 0) a.dev->poll_progress();
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS) << "send " << wc[i].wr_id;
      if (wc[i].status != IBV_WC_SUCCESS) failed = true;
      ++completed;
    }
  }
  receiver.join();
  EXPECT_FALSE(failed);
  EXPECT_EQ(completed, kMsgs);
  EXPECT_EQ(b.qp->counters().send_rnr_err, 0u) << "an RNR NAK although a buffer was posted";
  EXPECT_EQ(a.qp->counters().retry_rnr_exceeded_err, 0u);
}

TEST(PostingTest, AReceivePostedLateLetsTheWaitingSendIn) {
  // RNR grace (transport/qp.cc): a SEND that finds no receive waits for one; the receive post
  // wakes the engine, which lets it in. The sender has rnr_retry 0, so an RNR NAK would fail it:
  // success means the receive, not the end of the grace, decided. The grace is the longest
  // min_rnr_timer allows (code 0: 655 ms), so only a machine that kept this thread off its core
  // for that long between seeing the SEND wait and posting could make it fail.
  DeviceConfig ca = config("pf", loopback(49, 4, 1)), cb = config("pg", loopback(49, 4, 2));
  cb.rnr_grace_ns = 10'000'000'000;
  Side a, b;
  ASSERT_TRUE(a.setup(ca, 4096));
  ASSERT_TRUE(b.setup(cb, 4096));
  connect(a, b, 14, /*rnr_retry=*/0, /*min_rnr_timer=*/0);
  connect(b, a, 14, /*rnr_retry=*/0, /*min_rnr_timer=*/0);
  std::memcpy(a.buf.data(), "late receive", 13);
  transport::SendWqe s;
  s.wr_id = 1;
  s.opcode = IBV_WR_SEND;
  s.send_flags = IBV_SEND_SIGNALED;
  s.num_sge = 1;
  s.sge[0] = {reinterpret_cast<uintptr_t>(a.buf.data()), 2000, a.lkey};  // two packets
  size_t bad = 0;
  ASSERT_EQ(a.dev->post_send(a.qp, &s, 1, &bad), 0);
  const auto give_up = std::chrono::steady_clock::now() + kReturnsWithin;
  while (!b.qp->waits_for_recv() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(b.qp->waits_for_recv());
  const transport::RecvWqe w = recv_wqe(b, 7, 1024, 3000);
  ASSERT_EQ(b.dev->post_recv(b.qp, &w, 1, &bad), 0);
  const std::vector<ibv_wc> sent = test::poll_n(*a.scq, 1, 60s);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  const std::vector<ibv_wc> got = test::poll_n(*b.rcq, 1, 60s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].wr_id, 7u);
  EXPECT_EQ(got[0].byte_len, 2000u);
  EXPECT_EQ(std::memcmp(b.buf.data() + 1024, "late receive", 13), 0);
  EXPECT_EQ(b.qp->counters().rnr_waits, 1u);
  EXPECT_EQ(b.qp->counters().send_rnr_err, 0u);
  EXPECT_FALSE(b.qp->waits_for_recv());
}

}  // namespace
}  // namespace uroce
