// The progress thread of one device: it sleeps in epoll_wait on the port's wait fds (its
// sockets), the port's control fd (link notifications), a doorbell eventfd and a timerfd set to
// the earliest deadline (transport, fault injection, the port's own timers), and on each wake-up
// receives a batch through the receive pipeline (outside the device lock: ICRC and parsing need
// no shared state), then under the device lock hands the batch to its client, lets the client
// run timers and pump QPs, and flushes the transmit queue. An idle device therefore costs no
// CPU: no spinning, no periodic tick.
//
// The client (the Device) knows QPs; the engine knows only threads, fds, the pipeline and time,
// so it can be tested with a fake client and no transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/datapath.h"
#include "util/counter.h"
#include "transport/env.h"

namespace uroce {

// Current CLOCK_MONOTONIC time in nanoseconds: the engine's transport::Time.
transport::Time monotonic_now();

class Engine {
 public:
  class Client {
   public:
    virtual ~Client() = default;
    // Both run on the engine thread with the device lock held.
    virtual void on_packets(std::span<const RxPacket> pkts, transport::Time now) = 0;
    // Runs due timers and pumps QPs that want to send. Returns the earliest future deadline
    // (transport::kNever when none) and sets *again when more work is ready right now (e.g. a
    // QP still wants to pump after the transmit ring filled), so the engine loops without
    // sleeping.
    virtual transport::Time on_progress(transport::Time now, bool* again) = 0;
    // The port's link state changed (Port::on_control returned true). Runs on the engine thread
    // without any lock held.
    virtual void on_link_change() {}
  };

  // `mu` is the device lock. Throws std::system_error if the fds cannot be created.
  Engine(std::mutex& mu, Datapath& dp, Client& client, std::string thread_name);
  ~Engine();  // stops the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void start();
  void stop();  // idempotent; joins the thread

  // Wakes the thread for a progress pass (any thread, any lock state).
  void kick();
  // Ensures the work due at `deadline` (CLOCK_MONOTONIC ns) runs by then: the engine thread
  // wakes for it, or the application thread that polls runs it (see guarded_). Call with the
  // device lock held, e.g. after an application call armed a retransmission timer.
  void wake_by(transport::Time deadline);

  // One non-blocking receive-and-progress pass run by an application thread, typically one that
  // busy-polls a CQ and found it empty. On a machine with fewer cores than spinning threads the
  // engine thread may wait a whole scheduler tick to run; a polling application that drives
  // progress itself does not. Returns false at once if another thread is receiving (the engine,
  // or another poller) or nothing was received. Call without the device lock.
  bool poll_from_app();
  // An application thread that polled (poll_from_app) is about to block instead (it armed a CQ,
  // or waits on a completion channel): the engine takes the receive side back at once rather
  // than after the handoff time. Any thread, no lock.
  void stop_polling();
  // An application call that is not a post (a poll, a receive post, a wait): the ACKs its own
  // receive passes held for its next call (Datapath::set_hold) leave now — unless taking the
  // device lock would mean waiting (see engine.cc). Any thread, without the device lock.
  void release_held(transport::Time now);
  // Whether an application's CQ poll (with or without poll_from_app) returned completions. One
  // that spins on an empty CQ is about to poll again; one that took a completion may go off to
  // do something else (run()). Any thread, no lock.
  void note_poll_result(bool found) {
    if (app_found_.load(std::memory_order_relaxed) != found)
      app_found_.store(found, std::memory_order_relaxed);
  }

  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }
  // Counters the engine keeps for the device (all optional; call before start()): passes of its
  // own thread that found work to look at, receive-and-progress passes run by application
  // threads (poll_from_app) that received something, times the engine began receiving on
  // arrival beside a polling application that had left arrivals waiting, and times a polling
  // application's handoff lapsed (see run()).
  void set_counters(Counter* engine_passes, Counter* app_passes, Counter* rx_takeovers = nullptr,
                    Counter* handoff_lapses = nullptr) {
    engine_passes_ = engine_passes;
    app_passes_ = app_passes;
    rx_takeovers_ = rx_takeovers;
    handoff_lapses_ = handoff_lapses;
  }
  // Whether the engine now receives on arrival although an application thread polls: it found
  // that application leaving arrivals waiting (run()). Any thread; for tests and diagnostics.
  bool receives_beside_app() const { return beside_score_.load(std::memory_order_relaxed) > 0; }
  // How long after an application thread's last poll the engine takes the receive side back
  // (default kDefaultHandoffNs; after steady polling up to kMaxGuardNs: see guarded_). Tests
  // lengthen it to tell a wake-up on arrival from the handoff's lapse without depending on how fast
  // a loaded machine schedules threads.
  static constexpr transport::Time kDefaultHandoffNs = 1'000'000;
  void set_handoff_ns(transport::Time ns) {
    handoff_ns_.store(ns, std::memory_order_relaxed);
    push_at_.store(0, std::memory_order_relaxed);  // the next poll guards the new lapse
  }
  // How long an application thread that took a completion may go without polling before the
  // engine takes it to be spinning elsewhere (default kDefaultLeftNs; run()). Settable for the
  // same reason: a test makes it long so that a loaded machine descheduling its polling thread
  // does not look like an application that left.
  static constexpr transport::Time kDefaultLeftNs = 50'000;
  void set_left_ns(transport::Time ns) { left_ns_.store(ns, std::memory_order_relaxed); }

 private:
  void run();
  // Device lock held. arm_timer: the work a pass left is due at `deadline` and the engine thread
  // wakes for it. arm_kernel: only moves the timerfd.
  void arm_timer(transport::Time deadline);
  void arm_kernel(transport::Time deadline);
  // Application thread: keeps the timerfd at the handoff's lapse while it polls (poll_from_app).
  void push_guard(transport::Time now);
  // Device lock held: an application thread's pass left work due at `next`.
  void app_pass_done(transport::Time next, transport::Time now);
  // Under the device lock, after a receive: hands `rx` to the client, runs its progress, flushes
  // and returns the next deadline of everything the engine waits for (*again: work is ready now).
  // *link_changed is set when the port's poll() saw its link change.
  transport::Time pass(std::span<const RxPacket> rx, transport::Time now, bool* again,
                       bool* link_changed);

  // Lock order: rx_mu_ before mu_. rx_mu_ serialises receiving (the port's receive buffers and
  // the processing of a received batch) between the engine thread and polling applications.
  std::mutex rx_mu_;
  std::mutex& mu_;
  Datapath& dp_;
  Client& client_;
  std::string name_;
  int epfd_ = -1, doorbell_ = -1, timerfd_ = -1;
  int control_fd_ = -1;  // the port's (link notifications), or -1
  // The port's wait fds, and whether the engine's epoll set watches them now (engine thread):
  // while an application thread busy-polls, the engine stops waking for every datagram it would
  // only race the poller for (see run()).
  std::vector<int> rx_fds_;
  bool rx_watched_ = true;
  void watch_rx(bool on);
  transport::Time armed_ = transport::kNever;  // timerfd expiry; device lock
  // While an application thread polls and the engine leaves receiving to it, the timerfd only
  // guards the handoff: that thread runs due work itself (work_at_, and the port's: wants_poll)
  // and now and then pushes the timer out (push_guard) — by the handoff at first, by twice as
  // much with each push made in time, up to kMaxGuardNs (engine.cc) — so the engine thread
  // sleeps for as long as the application polls, and the application re-arms the timer some
  // 330 times a second at most. The engine used to wake at every deadline an application call
  // armed (a probe or ACK timer a round trip ahead) and at every handoff time, and the
  // application re-armed the timer as often: ~1 000 times a second each in a memif ping-pong,
  // each costing 12-20 us on a VM (a wake-up preempts a spinning application thread; a re-arm
  // after a pause reprograms the hrtimer) — the round trip's 99th percentile was 4-6x its
  // median. Set by push_guard, cleared when the engine arms the timer for work (arm_timer).
  // Written under the device lock.
  std::atomic<bool> guarded_{false};
  transport::Time guard_span_ = 0;  // how far ahead the last push set the guard; device lock
  // Whether the device sent anything but ACKs between the last two RC WRITEs that ended a message
  // without immediate data (an application that answers them: run()). Device lock.
  bool replied_ = false;
  // A copy of armed_, read without the lock (run(): whether the timer must move).
  std::atomic<transport::Time> timer_at_{transport::kNever};
  // The earliest deadline of the work passes left (written under the device lock): poll_from_app
  // reads it without the lock to see whether a timer is due.
  std::atomic<transport::Time> work_at_{transport::kNever};
  // When the polling application thread next pushes the guard while guarded_ (push_guard).
  std::atomic<transport::Time> push_at_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> wakeups_{0};
  Counter* engine_passes_ = nullptr;  // under the device lock
  Counter* app_passes_ = nullptr;
  Counter* rx_takeovers_ = nullptr;    // engine thread
  Counter* handoff_lapses_ = nullptr;  // engine thread
  // Receiving beside a polling application (run()) while positive; its score. Any thread.
  std::atomic<int> beside_score_{0};
  void score_beside(int delta);  // adds delta, within [0, kBesideMax]; 0 ends it
  std::atomic<transport::Time> handoff_ns_{kDefaultHandoffNs};
  std::atomic<transport::Time> left_ns_{kDefaultLeftNs};
  // When an application thread last called poll_from_app (CLOCK_MONOTONIC ns).
  std::atomic<transport::Time> last_app_poll_{0};
  std::atomic<bool> app_found_{false};  // note_poll_result
  std::thread thread_;
};

}  // namespace uroce
