// Completion queues, completion channels and the async event queue: the objects the engine
// produces into and application threads consume from. Each has its own lock, never the device's.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <vector>

#include "transport/env.h"
#include "transport/ring.h"

namespace uroce {

// A completion channel: the fd the application polls/epolls, plus the queue of CQs whose armed
// notification fired, in order, for ibv_get_cq_event.
//
// fd() is an epoll fd. Its set always holds the channel's eventfd, which carries one token per
// queued event (but those a thread raises for itself to take, Taking), so fd() is readable while
// an event is queued. While an application that polls
// fd() in its own loop (non-blocking, as ibv_get_cq_event(3) advises) also has the receive side
// of the device — the engine thread is not watching the port — the set holds the port's wait fds
// too (watch_port, decided by Engine::apply): the datagram that completes its work then wakes the
// application's own poll(), and its ibv_get_cq_event receives it (Device::get_cq_event): one
// wake-up per message instead of the engine's and then the application's.
class CompChannel {
 public:
  CompChannel();  // throws std::system_error if no eventfd or epoll fd can be had
  ~CompChannel();
  CompChannel(const CompChannel&) = delete;
  CompChannel& operator=(const CompChannel&) = delete;
  int fd() const { return fd_; }
  // The eventfd alone: readable exactly while an event is queued (a thread that sleeps in
  // ibv_get_cq_event polls it beside the port's wait fds itself).
  int event_fd() const { return event_fd_; }
  void notify(void* cq_cookie);  // queue an event and make fd() readable
  // Dequeues one event; blocks unless fd() is O_NONBLOCK (then EAGAIN), like the kernel's.
  // Returns 0 or a positive errno (EINTR when a signal interrupted the wait).
  int get_event(void** cq_cookie);
  // Dequeues one event if one is queued (EAGAIN otherwise); never blocks, whatever the fd's
  // flags. The eventfd's token is taken with the event, under the channel's lock, so the eventfd
  // is readable exactly while an event is queued and a reader never blocks on a token another
  // took.
  int try_get_event(void** cq_cookie);
  // A thread that takes this channel's events right after the receive pass it runs itself (in
  // ibv_get_cq_event) holds a Taking meanwhile: the events its own pass raises on this channel
  // are queued without a token on the eventfd — no write(2) when raised and no read(2) when
  // taken, two system calls per message of a program sleeping on its channel. When the Taking
  // ends, any such event still queued gets its token, so outside it the eventfd is readable
  // exactly while an event is queued (another thread may take a silent event meanwhile; it is
  // counted). One per thread at a time (nested: the inner one wins until it ends).
  class Taking {
   public:
    explicit Taking(CompChannel& ch);
    ~Taking();
    Taking(const Taking&) = delete;
    Taking& operator=(const Taking&) = delete;

   private:
    CompChannel& ch_;
    const CompChannel* outer_;
  };
  // Whether the application made fd() non-blocking (O_NONBLOCK): its gets must not sleep.
  bool nonblocking() const;
  size_t pending();  // events queued and not yet taken
  // Adds the port's wait fds to fd()'s set (`on`) or takes them out. Called under the engine's
  // policy lock only (Engine::apply), which also guards watching().
  void watch_port(std::span<const int> wait_fds, bool on);
  bool watching() const { return watching_.load(std::memory_order_relaxed); }
  // Whether the engine has this channel in its list (Engine::watch_port_on; set under the policy
  // lock, read anywhere: a get need not take that lock to learn it).
  bool listed() const { return listed_.load(std::memory_order_relaxed); }
  void set_listed(bool on) { listed_.store(on, std::memory_order_relaxed); }

 private:
  int fd_ = -1;        // epoll: event_fd_, and the port's wait fds while watching_
  int event_fd_ = -1;  // semaphore eventfd, non-blocking: one token per queued event
  std::atomic<bool> watching_{false};  // written under the policy lock, read anywhere
  std::atomic<bool> listed_{false};
  std::mutex mu_;
  std::deque<void*> events_;
  size_t silent_ = 0;  // queued events without an eventfd token (Taking); mu_
  static thread_local const CompChannel* taking_;
};

class AsyncEventQueue;

// One receive-and-progress pass (Engine::pass), on the thread that runs it: the completions a
// pass queues reach the application together, as an RNIC's burst of CQEs behind one interrupt,
// so a completion queued after the one that fired its CQ's event in the same pass, before the
// application polled the CQ, is covered by that event — arming the CQ again does not fire for it
// (Cq::req_notify): the application's poll after the event sees it. One queued after a poll is
// not (the poll may have come before it), and an arming fires for it at once, as ConnectX's does.
// Without this a program that arms before it polls (ibv_rc_pingpong -e: its pong and its ping's ACK
// arrive together) got a second, empty event for every message. Nested scopes keep the outer pass.
class CompletionPass {
 public:
  CompletionPass();
  ~CompletionPass();
  CompletionPass(const CompletionPass&) = delete;
  CompletionPass& operator=(const CompletionPass&) = delete;
  static uint64_t current() { return current_; }  // 0 outside any pass

 private:
  uint64_t outer_;
  static thread_local uint64_t current_;
};

// A CQ: a bounded ring of ibv_wc. push() is called by the engine with the device lock held.
// An empty poll — the loop a busy-polling application spins in — takes no lock: it reads an
// atomic count.
class Cq : public transport::CompletionSink {
 public:
  // `cookie` is the ibv_cq* the application knows: it names the CQ in completion events and in
  // the IBV_EVENT_CQ_ERR raised on `errors` (may be null) when the CQ overruns. `timestamps`:
  // stamp each completion with the clock when it is queued (ibv_create_cq_ex with
  // IBV_WC_EX_WITH_COMPLETION_TIMESTAMP); a CQ that cannot report them reads no clock.
  Cq(uint32_t cqe, CompChannel* channel, void* cookie, AsyncEventQueue* errors = nullptr,
     bool timestamps = false);
  // A completion. When the ring already holds `capacity()` entries the CQ overruns (IBTA C11-37):
  // the completion is lost, IBV_EVENT_CQ_ERR is raised once, and from then on the CQ takes no
  // completion at all — the QP that completes into it sees overrun() and enters ERR (C9-218,
  // transport/qp_impl.h). What the ring holds can still be polled.
  void push(const ibv_wc& wc) override;
  // `solicited`: a receive completion of a message with BTH.SE set (see CompletionSink).
  void push(const ibv_wc& wc, bool solicited) override;
  int poll(int n, ibv_wc* out);  // returns count, never blocks
  // The same, also giving each completion's timestamp (ts_ns[i], may be null): CLOCK_MONOTONIC
  // in nanoseconds, read when push() queued it (ibv_wc_read_completion_ts; the device clock is
  // this 1 GHz clock), or 0 for a CQ made without `timestamps`.
  int poll(int n, ibv_wc* out, uint64_t* ts_ns);
  // Arms one notification (ibv_req_notify_cq): 0, or EINVAL when the CQ has no channel.
  int req_notify(bool solicited_only);
  uint32_t capacity() const { return cqe_; }
  int resize(uint32_t cqe);  // EINVAL if fewer than the queued completions
  // Removes the queued completions of QP `qpn` (wc.qp_num), keeping the others in order; returns
  // how many went. Called when the QP is reset or destroyed, as rdma-core's mlx4/mlx5 providers
  // clean their CQs then: a completion of a QP's earlier life (the flush of its error state)
  // must not be polled as if it belonged to the reconnected QP, or to no QP at all.
  size_t clean(uint32_t qpn);
  bool overrun() const override;  // a completion was lost to a full CQ: the CQ is in error
  size_t size() const;            // completions waiting to be polled

 private:
  mutable std::mutex mu_;
  struct Entry {
    ibv_wc wc;
    uint64_t ts_ns;  // CLOCK_MONOTONIC when pushed (0 without timestamps)
  };
  transport::Ring<Entry> ring_;  // grows to the CQ's working depth, at most cqe_ entries
  // ring_.size(), written under mu_ after every change, read without it by poll() and size().
  std::atomic<size_t> count_{0};
  uint32_t cqe_;
  CompChannel* channel_;
  void* cookie_;
  AsyncEventQueue* errors_;
  const bool stamp_;
  enum class Arm { kNone, kNext, kSolicited } arm_ = Arm::kNone;
  // Completions queued that raised no event and have not all been polled since: any, and
  // solicited or unsuccessful ones (req_notify says why).
  bool missed_ = false, missed_solicited_ = false;
  uint64_t fired_pass_ = 0;           // the CompletionPass whose completion fired the last event
  std::atomic<bool> overrun_{false};  // written under mu_; read without it (overrun())
};

// The device's async event queue (ibv_get_async_event), with a pollable eventfd.
class AsyncEventQueue {
 public:
  AsyncEventQueue();
  ~AsyncEventQueue();
  int fd() const { return fd_; }
  void push(const ibv_async_event& ev);
  // Blocks unless O_NONBLOCK (then EAGAIN); 0 or a positive errno (EINTR: a signal interrupted it).
  int get(ibv_async_event* ev);

 private:
  int fd_ = -1;
  std::mutex mu_;
  std::deque<ibv_async_event> q_;
};

}  // namespace uroce
