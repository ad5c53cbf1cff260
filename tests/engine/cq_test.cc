#include "engine/cq.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace uroce {
namespace {

ibv_wc make_wc(uint64_t wr_id, ibv_wc_status status = IBV_WC_SUCCESS) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = IBV_WC_RECV;
  return wc;
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

void set_nonblock(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

TEST(CqTest, PollsInOrderAndBoundsTheRing) {
  Cq cq(3, nullptr, nullptr);
  for (uint64_t i = 1; i <= 3; ++i) cq.push(make_wc(i));
  EXPECT_FALSE(cq.overrun());
  cq.push(make_wc(4));  // one too many
  EXPECT_TRUE(cq.overrun());
  EXPECT_EQ(cq.size(), 3u);
  ibv_wc out[8];
  EXPECT_EQ(cq.poll(2, out), 2);
  EXPECT_EQ(out[0].wr_id, 1u);
  EXPECT_EQ(out[1].wr_id, 2u);
  EXPECT_EQ(cq.poll(8, out), 1);
  EXPECT_EQ(out[0].wr_id, 3u);
  EXPECT_EQ(cq.poll(8, out), 0);
  EXPECT_EQ(cq.poll(0, out), 0);
  EXPECT_EQ(cq.poll(-1, out), 0);
}

TEST(CqTest, ResizeRefusesFewerThanQueued) {
  Cq cq(4, nullptr, nullptr);
  for (uint64_t i = 0; i < 3; ++i) cq.push(make_wc(i));
  EXPECT_EQ(cq.resize(2), EINVAL);
  EXPECT_EQ(cq.resize(0), EINVAL);
  EXPECT_EQ(cq.resize(3), 0);
  EXPECT_EQ(cq.capacity(), 3u);
  cq.push(make_wc(9));
  EXPECT_TRUE(cq.overrun());
  EXPECT_EQ(cq.resize(16), 0);
}

TEST(CqTest, NotifyNeedsAChannel) {
  Cq cq(4, nullptr, nullptr);
  EXPECT_EQ(cq.req_notify(false), EINVAL);
}

TEST(CqTest, ArmedCqNotifiesOnceThroughThePollableChannel) {
  CompChannel ch;
  int cookie;
  Cq cq(16, &ch, &cookie);
  cq.push(make_wc(1));  // not armed: no event
  EXPECT_FALSE(readable(ch.fd()));
  ibv_wc wc[4];
  ASSERT_EQ(cq.poll(4, wc), 1);  // seen: it fires no arming later

  ASSERT_EQ(cq.req_notify(false), 0);
  EXPECT_FALSE(readable(ch.fd()));
  cq.push(make_wc(2));
  EXPECT_TRUE(readable(ch.fd()));
  cq.push(make_wc(3));  // one-shot: no second event without re-arming
  EXPECT_EQ(ch.pending(), 1u);

  void* got = nullptr;
  ASSERT_EQ(ch.get_event(&got), 0);
  EXPECT_EQ(got, &cookie);
  EXPECT_FALSE(readable(ch.fd()));
  set_nonblock(ch.fd());
  EXPECT_EQ(ch.get_event(&got), EAGAIN);

  ASSERT_EQ(cq.req_notify(false), 0);
  cq.push(make_wc(4));
  EXPECT_TRUE(readable(ch.fd()));
}

TEST(CqTest, SolicitedOnlyFiresForSolicitedOrErrorCompletions) {
  CompChannel ch;
  set_nonblock(ch.fd());
  Cq cq(16, &ch, &ch);
  void* got;

  ASSERT_EQ(cq.req_notify(true), 0);
  cq.push(make_wc(1));         // successful, unsolicited
  cq.push(make_wc(2), false);  // the same through the two-argument push
  EXPECT_FALSE(readable(ch.fd()));
  cq.push(make_wc(3), true);  // BTH.SE was set
  EXPECT_TRUE(readable(ch.fd()));
  EXPECT_EQ(ch.get_event(&got), 0);

  ASSERT_EQ(cq.req_notify(true), 0);
  cq.push(make_wc(4, IBV_WC_REM_ACCESS_ERR));  // errors are solicited (ibv_req_notify_cq(3))
  EXPECT_EQ(ch.get_event(&got), 0);
  EXPECT_EQ(ch.get_event(&got), EAGAIN);

  // Arming for "next" after "solicited" widens the arming; the reverse does not narrow it.
  ASSERT_EQ(cq.req_notify(true), 0);
  ASSERT_EQ(cq.req_notify(false), 0);
  cq.push(make_wc(5));
  EXPECT_EQ(ch.get_event(&got), 0);
  ASSERT_EQ(cq.req_notify(false), 0);
  ASSERT_EQ(cq.req_notify(true), 0);
  cq.push(make_wc(6));
  EXPECT_EQ(ch.get_event(&got), 0);
}

// A completion queued while the CQ was not armed, and not polled since, fires the next arming at
// once (ConnectX arms relative to its consumer index): UCX drains its CQs, then its channel with
// a non-blocking ibv_get_cq_event — whose receive pass may complete a message —, then arms and
// sleeps. One that raised an event, or was polled, does not fire an arming again.
TEST(CqTest, AnArmingFiresAtOnceForACompletionThatRaisedNoEvent) {
  CompChannel ch;
  set_nonblock(ch.fd());
  Cq cq(16, &ch, &ch);
  void* got;
  ibv_wc wc[4];

  cq.push(make_wc(1));  // not armed
  ASSERT_EQ(cq.req_notify(false), 0);
  EXPECT_EQ(ch.get_event(&got), 0) << "fired at once";
  EXPECT_EQ(ch.get_event(&got), EAGAIN);
  ASSERT_EQ(cq.req_notify(false), 0);  // the same completion, still queued: reported already
  EXPECT_EQ(ch.get_event(&got), EAGAIN);
  cq.push(make_wc(2));  // armed: its event as usual
  EXPECT_EQ(ch.get_event(&got), 0);

  // ibv_rc_pingpong -e: an event, arm again, then poll: no second event for what it polls.
  ASSERT_EQ(cq.req_notify(false), 0);
  EXPECT_EQ(ch.get_event(&got), EAGAIN);
  EXPECT_EQ(cq.poll(4, wc), 2);
  cq.push(make_wc(3));  // armed above
  EXPECT_EQ(ch.get_event(&got), 0);
  EXPECT_EQ(cq.poll(4, wc), 1);

  // Polled before the arming: nothing fires.
  cq.push(make_wc(4));
  EXPECT_EQ(cq.poll(4, wc), 1);
  ASSERT_EQ(cq.req_notify(false), 0);
  EXPECT_EQ(ch.get_event(&got), EAGAIN);
  cq.push(make_wc(5));
  EXPECT_EQ(ch.get_event(&got), 0);
  EXPECT_EQ(cq.poll(4, wc), 1);

  // Solicited-only arming: an unsolicited completion that raised no event does not fire it; a
  // solicited one (or an error) does; arming for "next" fires for either.
  cq.push(make_wc(6));  // not armed: missed, unsolicited
  ASSERT_EQ(cq.req_notify(true), 0);
  EXPECT_EQ(ch.get_event(&got), EAGAIN);
  cq.push(make_wc(7), true);  // fires that arming
  EXPECT_EQ(ch.get_event(&got), 0);
  EXPECT_EQ(cq.poll(4, wc), 2);
  cq.push(make_wc(8, IBV_WC_REM_ACCESS_ERR));  // not armed: missed, and errors are solicited
  ASSERT_EQ(cq.req_notify(true), 0);
  EXPECT_EQ(ch.get_event(&got), 0);
  EXPECT_EQ(cq.poll(4, wc), 1);
  cq.push(make_wc(9));  // not armed: missed, for "next" only
  ASSERT_EQ(cq.req_notify(true), 0);
  EXPECT_EQ(ch.get_event(&got), EAGAIN);
  ASSERT_EQ(cq.req_notify(false), 0);
  EXPECT_EQ(ch.get_event(&got), 0);
}

// A receive pass's completions reach the program together (CompletionPass): one that a pass
// queues after the one that fired the event is covered by it, so the arming that follows the
// event (ibv_rc_pingpong -e arms, then polls: its pong and its ping's ACK came in one pass) does
// not fire a second, empty event. Outside a pass, or in another pass, it is missed as before.
TEST(CqTest, CompletionsOfThePassThatFiredTheEventAreCoveredByIt) {
  CompChannel ch;
  set_nonblock(ch.fd());
  Cq cq(16, &ch, &ch);
  void* got;
  ibv_wc wc[4];
  ASSERT_EQ(cq.req_notify(false), 0);
  {
    const CompletionPass pass;
    EXPECT_NE(CompletionPass::current(), 0u);
    cq.push(make_wc(1));  // fires
    cq.push(make_wc(2));  // covered by that event
  }
  EXPECT_EQ(CompletionPass::current(), 0u);
  EXPECT_EQ(ch.get_event(&got), 0);
  ASSERT_EQ(cq.req_notify(false), 0);
  EXPECT_EQ(ch.get_event(&got), EAGAIN) << "no second event for the covered completion";
  EXPECT_EQ(cq.poll(4, wc), 2);

  // The next pass: its completion fires the arming above; one queued in a later pass is not
  // covered by that event, and fires the next arming at once.
  {
    const CompletionPass pass;
    cq.push(make_wc(3));
  }
  EXPECT_EQ(ch.get_event(&got), 0);
  {
    const CompletionPass pass;
    cq.push(make_wc(4));
  }
  ASSERT_EQ(cq.req_notify(false), 0);
  EXPECT_EQ(ch.get_event(&got), 0) << "missed in a pass of its own";
  EXPECT_EQ(cq.poll(4, wc), 2);

  // The application polls between the two (another thread's pass ran beside it): the second is
  // not covered — that poll came before it — and the next arming fires at once for it.
  ASSERT_EQ(cq.req_notify(false), 0);
  {
    const CompletionPass pass;
    cq.push(make_wc(41));  // fires
    EXPECT_EQ(ch.get_event(&got), 0);
    EXPECT_EQ(cq.poll(4, wc), 1);
    cq.push(make_wc(42));
  }
  ASSERT_EQ(cq.req_notify(false), 0);
  EXPECT_EQ(ch.get_event(&got), 0) << "queued after the application's poll";
  EXPECT_EQ(cq.poll(4, wc), 1);

  // Without a pass (a completion queued by a post: a flush), as before.
  ASSERT_EQ(cq.req_notify(false), 0);
  cq.push(make_wc(5));
  cq.push(make_wc(6));
  EXPECT_EQ(ch.get_event(&got), 0);
  ASSERT_EQ(cq.req_notify(false), 0);
  EXPECT_EQ(ch.get_event(&got), 0);
}

// A thread that takes its channel's events right after its own pass (CompChannel::Taking) raises
// them without an eventfd token — and the fd stays readable exactly while an event is queued
// once the Taking ends; other threads' events keep their tokens all along.
TEST(CqTest, EventsAThreadRaisesForItselfSkipTheEventfdUntilItStopsTaking) {
  CompChannel ch;
  set_nonblock(ch.fd());
  Cq cq(16, &ch, &ch);
  void* got;
  {
    CompChannel::Taking taking(ch);
    ASSERT_EQ(cq.req_notify(false), 0);
    cq.push(make_wc(1));
    EXPECT_FALSE(readable(ch.event_fd())) << "no token for an event this thread takes";
    EXPECT_EQ(ch.pending(), 1u);
    EXPECT_EQ(ch.try_get_event(&got), 0);
    EXPECT_EQ(ch.try_get_event(&got), EAGAIN);
    // Another thread's event has its token.
    std::thread([&] {
      ASSERT_EQ(cq.req_notify(false), 0);
      cq.push(make_wc(2));
    }).join();
    EXPECT_TRUE(readable(ch.event_fd()));
    // One raised here and left queued: the fd says nothing while the Taking lasts…
    ASSERT_EQ(cq.req_notify(false), 0);
    cq.push(make_wc(3));
    EXPECT_EQ(ch.pending(), 2u);
  }
  // …and is readable once it ends, for both events, each taken with its token.
  EXPECT_TRUE(readable(ch.event_fd()));
  EXPECT_EQ(ch.try_get_event(&got), 0);
  EXPECT_EQ(ch.try_get_event(&got), 0);
  EXPECT_FALSE(readable(ch.event_fd()));
  EXPECT_EQ(ch.try_get_event(&got), EAGAIN);
}

TEST(CqTest, ChannelServesSeveralCqsInOrder) {
  CompChannel ch;
  set_nonblock(ch.fd());
  int a, b;
  Cq cqa(4, &ch, &a), cqb(4, &ch, &b);
  cqb.req_notify(false);
  cqa.req_notify(false);
  cqb.push(make_wc(1));
  cqa.push(make_wc(2));
  void* got;
  ASSERT_EQ(ch.get_event(&got), 0);
  EXPECT_EQ(got, &b);
  ASSERT_EQ(ch.get_event(&got), 0);
  EXPECT_EQ(got, &a);
  EXPECT_EQ(ch.get_event(&got), EAGAIN);
}

TEST(CqTest, BlockingGetEventWaitsForANotification) {
  CompChannel ch;
  Cq cq(4, &ch, &ch);
  cq.req_notify(false);
  void* got = nullptr;
  int rc = -1;
  std::thread waiter([&] { rc = ch.get_event(&got); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  cq.push(make_wc(1));
  waiter.join();
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(got, &ch);
}

TEST(CqTest, OverrunCompletionDoesNotNotify) {
  CompChannel ch;
  set_nonblock(ch.fd());
  Cq cq(1, &ch, &ch);
  void* got;
  ASSERT_EQ(cq.req_notify(false), 0);
  cq.push(make_wc(1));  // its event
  ASSERT_EQ(ch.get_event(&got), 0);
  ASSERT_EQ(cq.req_notify(false), 0);
  cq.push(make_wc(2));  // lost
  EXPECT_TRUE(cq.overrun());
  EXPECT_FALSE(readable(ch.fd()));
}

// IBTA C11-37: an overrun puts the CQ in error: one IBV_EVENT_CQ_ERR naming it, and no
// completion is added afterwards, even once the application has made room.
TEST(CqTest, OverrunRaisesOneCqErrorAndTheCqTakesNoMore) {
  AsyncEventQueue errors;
  int cookie;
  Cq cq(2, nullptr, &cookie, &errors);
  cq.push(make_wc(1));
  cq.push(make_wc(2));
  EXPECT_FALSE(readable(errors.fd()));
  cq.push(make_wc(3));  // lost
  cq.push(make_wc(4));
  EXPECT_TRUE(cq.overrun());
  set_nonblock(errors.fd());
  ibv_async_event ev{};
  ASSERT_EQ(errors.get(&ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(static_cast<void*>(ev.element.cq), &cookie);
  EXPECT_EQ(errors.get(&ev), EAGAIN) << "one event per overrun CQ";
  ibv_wc out[4];
  ASSERT_EQ(cq.poll(4, out), 2);  // what it held is still there
  EXPECT_EQ(out[1].wr_id, 2u);
  cq.push(make_wc(5));
  EXPECT_EQ(cq.poll(4, out), 0);
}

TEST(CqTest, CleanRemovesOneQpsCompletionsInOrder) {
  Cq cq(8, nullptr, nullptr);
  for (uint64_t i = 0; i < 6; ++i) {
    ibv_wc wc = make_wc(i);
    wc.qp_num = i % 2 ? 0x22 : 0x11;
    cq.push(wc);
  }
  EXPECT_EQ(cq.clean(0x22), 3u);
  EXPECT_EQ(cq.clean(0x33), 0u);
  ibv_wc out[8];
  ASSERT_EQ(cq.poll(8, out), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i].wr_id, uint64_t(2 * i));
}

// A blocking wait interrupted by a signal returns EINTR (libibverbs' are a read() of the event
// file): a program that bounds its wait with alarm() must get control back.
TEST(CqTest, BlockingWaitsReturnEintrWhenASignalInterruptsThem) {
  struct sigaction sa {
  }, old_sa{};
  sa.sa_handler = [](int) {};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the read is interrupted
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old_sa), 0);
  const pthread_t self = pthread_self();
  std::atomic<bool> done{false};
  std::thread poker([&] {
    // Repeats until the waiter is back: the first signal may come before it blocks.
    while (!done.load()) {
      pthread_kill(self, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  CompChannel ch;
  void* cookie = nullptr;
  EXPECT_EQ(ch.get_event(&cookie), EINTR);
  AsyncEventQueue q;
  ibv_async_event ev{};
  EXPECT_EQ(q.get(&ev), EINTR);
  done = true;
  poker.join();
  sigaction(SIGUSR1, &old_sa, nullptr);
}

TEST(AsyncEventQueueTest, PollableBlockingAndNonBlocking) {
  AsyncEventQueue q;
  EXPECT_FALSE(readable(q.fd()));
  ibv_async_event ev{};
  ev.event_type = IBV_EVENT_COMM_EST;
  q.push(ev);
  ev.event_type = IBV_EVENT_QP_FATAL;
  q.push(ev);
  EXPECT_TRUE(readable(q.fd()));
  ibv_async_event out{};
  ASSERT_EQ(q.get(&out), 0);
  EXPECT_EQ(out.event_type, IBV_EVENT_COMM_EST);
  ASSERT_EQ(q.get(&out), 0);
  EXPECT_EQ(out.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_FALSE(readable(q.fd()));
  set_nonblock(q.fd());
  EXPECT_EQ(q.get(&out), EAGAIN);
}

}  // namespace
}  // namespace uroce
