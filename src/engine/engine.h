// The progress thread of one device: it sleeps in epoll_wait on the port's wait fds (its
// sockets), the port's control fd (link notifications), a doorbell eventfd and a timerfd set to
// the earliest deadline (transport, fault injection, the port's own timers), and on each wake-up
// receives a batch through the receive pipeline (outside the device lock: ICRC and parsing need
// no shared state), then under the device lock hands the batch to its client, lets the client
// run timers and pump QPs, and flushes the transmit queue. An idle device therefore costs no
// CPU: no spinning, no periodic tick.
//
// Who receives — this thread or an application thread inside its verbs calls — is decided by the
// progress policy (progress.h, pure and tested in virtual time); this class carries its decisions
// out with epoll, the timerfd and the locks.
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

#include "engine/cq.h"
#include "engine/datapath.h"
#include "engine/progress.h"
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
  // wakes for it, or the application thread that polls runs it (Progress). Call with the device
  // lock held, e.g. after an application call armed a retransmission timer.
  void wake_by(transport::Time deadline);

  // One non-blocking receive-and-progress pass run by an application thread, typically one that
  // busy-polls a CQ and found it empty. On a machine with fewer cores than spinning threads the
  // engine thread may wait a whole scheduler tick to run; a polling application that drives
  // progress itself does not. Returns false at once if another thread is receiving (the engine,
  // or another poller) or nothing was received. Never waits for the device lock but to process
  // what it received. Call without the device lock. `wait_for_receiver`: a thread woken from
  // its wait by an arrival waits for a receive pass another thread runs instead of returning
  // (it would only find the wait fds still readable and spin).
  bool poll_from_app(bool wait_for_receiver = false);
  // An application thread that polled (poll_from_app) is about to block outside uroce (it armed
  // a CQ and will not wait in ibv_get_cq_event): the engine takes the receive side back at once
  // rather than after the handoff time. Any thread, no lock.
  void stop_polling();
  // A CQ was armed (ibv_req_notify_cq). A program that then sleeps in ibv_get_cq_event is woken
  // by the datagram itself (wait_begin), so nothing needs doing; one that sleeps elsewhere (its
  // own poll() on the channel's fd) needs the engine to receive: stop_polling. Which one this
  // program is shows in its waits (arm_means_stop_). Any thread, no lock.
  void on_arm();
  // A thread is about to sleep in ibv_get_cq_event (wait_begin) / is back (wait_end). Returns
  // whether it may sleep on the port's wait fds (wait_fds()) and receive when woken: then the
  // engine stops receiving while it sleeps — the datagram that completes the thread's work wakes
  // that thread alone, which receives it itself (poll_from_app; one wake-up per message). False
  // for a port with no wait fds (poll mode): the engine receives, as for stop_polling. Any
  // thread, no lock.
  bool wait_begin();
  void wait_end();
  // The port's wait fds (sockets), for a waiting thread's poll(). Fixed for the engine's life.
  std::span<const int> wait_fds() const { return rx_fds_; }
  // A program polls `ch`'s fd in its own poll/epoll loop (it made the fd non-blocking and calls
  // ibv_get_cq_event when it is readable): from now on, whenever the engine does not watch the
  // port (an application thread has the receive side), the channel's set holds the port's wait
  // fds, so a datagram wakes that program's poll() and its ibv_get_cq_event receives it (one
  // wake-up per message). A channel the engine took back from (a lapse) gets its events from
  // the engine, as before; its next arms no longer hand the receive side over (on_arm). Returns
  // whether the channel can watch the port (a port with wait fds). Any thread, no lock;
  // idempotent.
  bool watch_port_on(CompChannel& ch);
  // A thread that polls is about to sleep on a watching channel's fd (Progress::on_app_sleeps).
  // Any thread, no lock.
  void app_sleeps();
  // Before `ch` goes away: the engine never touches it again.
  void forget_channel(CompChannel& ch);
  // What an application's CQ poll (with or without poll_from_app) returned. One that spins on an
  // empty CQ is about to poll again; one that took a completion may go off to do something else
  // (Progress). Any thread, no lock.
  void note_poll_result(bool found) {
    if (app_found_.load(std::memory_order_relaxed) != found)
      app_found_.store(found, std::memory_order_relaxed);
  }
  // An application call that is not a post (a poll, a receive post, a wait): the ACKs its own
  // receive passes held for its next call (Datapath::set_hold) leave now — unless taking the
  // device lock would mean waiting (see engine.cc). Any thread, without the device lock.
  void release_held(transport::Time now);

  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }
  // Counters the engine keeps for the device (all optional; call before start()): passes of its
  // own thread that found work to look at, receive-and-progress passes run by application
  // threads (poll_from_app) that received something, times the engine began receiving on
  // arrival beside a polling application that had left arrivals waiting, and times a polling
  // application's handoff lapsed (Progress).
  void set_counters(Counter* engine_passes, Counter* app_passes, Counter* rx_takeovers = nullptr,
                    Counter* handoff_lapses = nullptr) {
    engine_passes_ = engine_passes;
    app_passes_ = app_passes;
    rx_takeovers_ = rx_takeovers;
    handoff_lapses_ = handoff_lapses;
  }
  // The policy's state (Progress), for tests and diagnostics. Any thread.
  Progress::State progress_state() const;
  // Whether the engine now receives on arrival although an application thread polls: it found
  // that application leaving arrivals waiting (Progress::State::kBeside). Any thread.
  bool receives_beside_app() const { return progress_state() == Progress::State::kBeside; }
  // How long after an application thread's last poll the engine takes the receive side back
  // (default kDefaultHandoffNs; after steady polling up to the guard's 4 ms: Progress). Tests
  // lengthen it to tell a wake-up on arrival from the handoff's lapse without depending on how
  // fast a loaded machine schedules threads.
  static constexpr transport::Time kDefaultHandoffNs = Progress::Tunables{}.handoff;
  void set_handoff_ns(transport::Time ns);
  // How long an application thread that took a completion may go without polling before the
  // engine takes it to be spinning elsewhere (default kDefaultLeftNs; Progress). Settable for the
  // same reason: a test makes it long so that a loaded machine descheduling its polling thread
  // does not look like an application that left.
  static constexpr transport::Time kDefaultLeftNs = Progress::Tunables{}.left;
  void set_left_ns(transport::Time ns);

 private:
  void run();
  // Under the device lock, after a receive: hands `rx` to the client, runs its progress, flushes
  // and returns the next deadline of everything the engine waits for (*again: work is ready now).
  // *link_changed is set when the port's poll() saw its link change.
  transport::Time pass(std::span<const RxPacket> rx, transport::Time now, bool* again,
                       bool* link_changed);
  // Policy lock held: carry out what progress_ decided — the timerfd at progress_.timer_at(),
  // the port's wait fds in the engine's epoll set iff progress_.engine_receives() — and trace
  // its transitions (UROCE_LOG=debug).
  void apply();
  // Policy lock held: hands progress_ the latest poll application threads recorded without it.
  void fold_polls();
  // The policy lock for one decision: taken (or tried), the recorded polls folded in, and what
  // the policy decided carried out when it goes.
  class Policy {
   public:
    explicit Policy(Engine& e) : e_(e), g_(e.pmu_) { e_.fold_polls(); }
    Policy(Engine& e, std::try_to_lock_t t) : e_(e), g_(e.pmu_, t) {
      if (g_.owns_lock()) e_.fold_polls();
    }
    ~Policy() {
      if (g_.owns_lock()) e_.apply();
    }
    Policy(const Policy&) = delete;
    Policy& operator=(const Policy&) = delete;
    bool owns() const { return g_.owns_lock(); }
    Progress* operator->() { return &e_.progress_; }

   private:
    Engine& e_;
    std::unique_lock<std::mutex> g_;
  };
  void arm_kernel(transport::Time deadline);

  // Lock order: rx_mu_, then the device lock mu_, then the policy lock pmu_. rx_mu_ serialises
  // receiving (the port's receive buffers and the processing of a received batch) between the
  // engine thread and application threads. pmu_ guards progress_ and what carries its decisions
  // out (the timerfd, the epoll registrations): held briefly, never across a pass.
  std::mutex rx_mu_;
  std::mutex& mu_;
  mutable std::mutex pmu_;
  Datapath& dp_;
  Client& client_;
  std::string name_;
  int epfd_ = -1, doorbell_ = -1, timerfd_ = -1;
  int control_fd_ = -1;  // the port's (link notifications), or -1
  // The port's wait fds, and whether the engine's epoll set watches them now (pmu_).
  std::vector<int> rx_fds_;
  bool rx_watched_ = true;
  // Completion channels a program polls in its own loop (watch_port_on), whose sets hold the
  // port's wait fds while the engine's does not (pmu_).
  std::vector<CompChannel*> channels_;
  Progress progress_;                              // pmu_
  transport::Time kernel_at_ = transport::kNever;  // the timerfd's expiry (pmu_)
  uint64_t traced_ = 0;  // progress_.transition_count() last traced (pmu_)
  // Mirrors of progress_'s work_at(), timer_at(), push_at() and state(), for an application's
  // poll to read without the policy lock (written under it, by apply()).
  std::atomic<transport::Time> work_at_{transport::kNever};
  std::atomic<transport::Time> timer_at_{transport::kNever};
  std::atomic<transport::Time> push_at_{0};
  std::atomic<Progress::State> state_{Progress::State::kEngine};
  // The last CQ poll of an application thread, recorded without the policy lock (poll_from_app),
  // and the latest one folded into progress_ (pmu_).
  std::atomic<transport::Time> app_poll_at_{0};
  transport::Time folded_poll_ = 0;
  // Whether a CQ arm means the program will sleep outside uroce (on_arm): until a thread has
  // waited in ibv_get_cq_event, and again after a lapse that followed an arm.
  std::atomic<bool> arm_means_stop_{true};
  std::atomic<bool> armed_since_wait_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> wakeups_{0};
  Counter* engine_passes_ = nullptr;  // under the device lock
  Counter* app_passes_ = nullptr;
  Counter* rx_takeovers_ = nullptr;     // engine thread
  Counter* handoff_lapses_ = nullptr;   // engine thread
  std::atomic<bool> app_found_{false};  // note_poll_result
  std::thread thread_;
};

}  // namespace uroce
