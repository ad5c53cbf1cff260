#include "engine/engine.h"

#include "engine/cq.h"
#include "util/signals.h"
#include "util/log.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <system_error>
#include <vector>

namespace uroce {

transport::Time monotonic_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<transport::Time>(ts.tv_sec) * 1000000000ull +
         static_cast<transport::Time>(ts.tv_nsec);
}

namespace {

constexpr transport::Time kMinTimerNs = 10'000;
// Poll mode (PortCaps::poll_mode): keep polling this long after the last receive or pending
// work; then sleep, on receive interrupts or on a timer that doubles from kMinBackoffNs to
// kMaxBackoffNs (an idle device then wakes at most 1000 times a second: about 0% CPU). An
// application thread that polled within the handoff time drives progress itself (poll_from_app),
// so the engine does not spin against it.
constexpr transport::Time kSpinNs = 50'000;
constexpr transport::Time kMinBackoffNs = 20'000;
constexpr transport::Time kMaxBackoffNs = 1'000'000;
// Progress::Tunables::max_guard, the longest a polling application's guard runs: how long the
// engine thread may take, at worst, to notice that an application which polled steadily stopped
// without saying so (no CQ armed, no completion channel) — and so how long arrivals, and ACKs its
// last pass held for its next call, may wait then. Below the 5 ms after which a peer's
// early-retransmit probe fires (kPtoFloorNs, completer.cc), and far inside RC's ACK timeouts
// (perftest and rdma_cm default to 67 ms and more). The application then re-arms the timer ~330
// times a second.
static_assert(Progress::Tunables{}.max_guard == 4'000'000);

// Whether `rx` holds an RC (or XRC) WRITE that ends a message without immediate data: one whose
// target learns of it only by watching memory (Datapath::Hold::kUntilPost).
bool ends_silent_write(std::span<const RxPacket> rx) {
  return std::any_of(rx.begin(), rx.end(), [](const RxPacket& p) {
    const auto op = wire::Opcode(p.pkt.bth.opcode);
    return op == wire::Opcode::kRcWriteOnly || op == wire::Opcode::kRcWriteLast ||
           op == wire::Opcode::kXrcWriteOnly || op == wire::Opcode::kXrcWriteLast;
  });
}

// An eventfd (not in semaphore mode) or a timerfd: one read takes its whole count and resets it.
void drain(int fd) {
  uint64_t v;
  ssize_t r = read(fd, &v, sizeof v);
  (void)r;  // EAGAIN: another pass took it first
}

}  // namespace

Engine::Engine(std::mutex& mu, Datapath& dp, Client& client, std::string thread_name)
    : mu_(mu),
      dp_(dp),
      client_(client),
      name_(std::move(thread_name)),
      progress_(!dp.port().caps().poll_mode && !dp.port().wait_fds().empty()) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  doorbell_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  timerfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (epfd_ < 0 || doorbell_ < 0 || timerfd_ < 0) {
    int e = errno;
    for (int fd : {epfd_, doorbell_, timerfd_})
      if (fd >= 0) close(fd);
    throw std::system_error(e, std::generic_category(), "engine fds");
  }
  control_fd_ = dp_.port().control_fd();
  rx_fds_.assign(dp_.port().wait_fds().begin(), dp_.port().wait_fds().end());
  std::vector<int> fds = rx_fds_;
  fds.push_back(doorbell_);
  fds.push_back(timerfd_);
  if (control_fd_ >= 0) fds.push_back(control_fd_);
  for (int fd : fds) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      int e = errno;
      for (int f : {epfd_, doorbell_, timerfd_}) close(f);
      throw std::system_error(e, std::generic_category(), "epoll_ctl");
    }
  }
}

Engine::~Engine() {
  stop();
  close(timerfd_);
  close(doorbell_);
  close(epfd_);
}

void Engine::start() {
  AllSignalsBlocked blocked;  // the engine thread takes no signal (signals.h)
  thread_ = std::thread([this] { run(); });
  // Thread names are at most 15 characters; best effort.
  pthread_setname_np(thread_.native_handle(), name_.substr(0, 15).c_str());
}

void Engine::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  kick();
  thread_.join();
}

void Engine::kick() {
  uint64_t one = 1;
  ssize_t r = write(doorbell_, &one, sizeof one);
  (void)r;  // EAGAIN only if the counter is saturated, and then the thread is awake anyway
}

void Engine::apply() {
  const transport::Time at = progress_.timer_at();
  if (at != kernel_at_) arm_kernel(at);
  work_at_.store(progress_.work_at(), std::memory_order_relaxed);
  push_at_.store(progress_.push_at(), std::memory_order_relaxed);
  state_.store(progress_.state(), std::memory_order_relaxed);
  // The engine stops waking for every datagram while an application thread receives them (it
  // polls, or sleeps with the wait fds in its own set): measured, it woke once per packet only to
  // race that thread for the receive lock and for two cores. Datagrams that arrive meanwhile are
  // still there when it watches again (level-triggered).
  const bool watch = progress_.engine_receives();
  if (watch != rx_watched_ && !rx_fds_.empty()) {
    for (int fd : rx_fds_) {
      epoll_event ev{};
      ev.events = watch ? uint32_t{EPOLLIN} : 0u;
      ev.data.fd = fd;
      epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
    }
    rx_watched_ = watch;
  }
  // Exactly one side watches the port: the engine, or the application threads — those that
  // sleep in ibv_get_cq_event have the wait fds in their own poll() (Device::get_cq_event), and
  // those that poll their channel's fd in their own loop find them in the channel's set.
  for (CompChannel* ch : channels_) ch->watch_port(rx_fds_, !watch);
  if (progress_.transition_count() != traced_) {
    traced_ = progress_.transition_count();
    const Progress::Transition& t = progress_.last_transition();
    log().debug("{}: progress: {} --{}--> {}", name_, Progress::name(t.from),
                Progress::name(t.cause), Progress::name(t.to));
  }
}

void Engine::arm_kernel(transport::Time deadline) {
  kernel_at_ = deadline;
  timer_at_.store(deadline, std::memory_order_relaxed);
  itimerspec its{};
  if (deadline != transport::kNever) {
    // A deadline of 0 would disarm the timer; anything in the past fires immediately.
    transport::Time d = deadline == 0 ? 1 : deadline;
    its.it_value.tv_sec = static_cast<time_t>(d / 1000000000ull);
    its.it_value.tv_nsec = static_cast<long>(d % 1000000000ull);
  }
  timerfd_settime(timerfd_, TFD_TIMER_ABSTIME, &its, nullptr);
}

void Engine::wake_by(transport::Time deadline) {
  // Most calls arm nothing earlier than what is armed: no policy lock for them.
  if (deadline >= timer_at_.load(std::memory_order_relaxed) &&
      deadline >= work_at_.load(std::memory_order_relaxed))
    return;
  Policy p(*this);
  p->on_deadline(deadline);
}

void Engine::set_handoff_ns(transport::Time ns) {
  Policy p(*this);
  p->set_handoff(ns);
}

void Engine::set_left_ns(transport::Time ns) {
  Policy p(*this);
  p->set_left(ns);
}

Progress::State Engine::progress_state() const {
  std::lock_guard<std::mutex> g(pmu_);
  return progress_.state();
}

void Engine::fold_polls() {
  // The polls application threads recorded without the policy lock, the latest only: it says
  // everything the earlier ones said (on_app_poll keeps the last time).
  const transport::Time t = app_poll_at_.load(std::memory_order_relaxed);
  if (t > folded_poll_) {
    folded_poll_ = t;
    progress_.on_app_poll(t);
  }
}

transport::Time Engine::pass(std::span<const RxPacket> rx, transport::Time now, bool* again,
                             bool* link_changed) {
  const CompletionPass completions;  // what this pass completes reaches the program together
  if (!rx.empty()) client_.on_packets(rx, now);
  *again = false;
  if (dp_.port().poll(now)) *link_changed = true;
  transport::Time next = client_.on_progress(now, again);
  dp_.tx_flush(now);
  // Datagrams that fault injection holds back (UROCE_FAULTS delay, reorder) and the port's own
  // timers fall due even when nothing else happens.
  next = std::min({next, dp_.fault_deadline(), dp_.port().next_deadline()});
  // A deadline the client did not advance past `now` would make the timer fire at once, for
  // ever; bound such a (transport) bug to a wake-up per kMinTimerNs instead of a spinning core.
  if (next <= now) next = now + kMinTimerNs;
  return next;
}

void Engine::stop_polling() {
  const transport::Time now = monotonic_now();
  // What its passes held for its next call leaves before it sleeps, not at the engine's pass.
  release_held(now);
  bool kick_now;
  {
    Policy p(*this);
    kick_now = p->on_app_stop(now);
  }
  // The engine's pass on the kick arms the timer for the work due (it ends the guard).
  if (kick_now) kick();
}

void Engine::on_arm() {
  armed_since_wait_.store(true, std::memory_order_relaxed);
  if (arm_means_stop_.load(std::memory_order_relaxed)) stop_polling();
}

bool Engine::wait_begin() {
  const transport::Time now = monotonic_now();
  Progress::WaitBegin w;
  {
    Policy p(*this);
    w = p->on_wait_begin(now);
  }
  if (w.kick) kick();
  if (w.waits) {
    // This program sleeps in ibv_get_cq_event after arming its CQ: its arms need not hand the
    // receive side to the engine (on_arm).
    arm_means_stop_.store(false, std::memory_order_relaxed);
    armed_since_wait_.store(false, std::memory_order_relaxed);
  }
  return w.waits;
}

bool Engine::watch_port_on(CompChannel& ch) {
  if (!progress_.app_can_wait()) return false;
  // A program that looks at its channel without blocking sleeps on its fd: arming its CQ
  // announces that sleep, which the channel's set now wakes on arrival (on_arm).
  if (arm_means_stop_.load(std::memory_order_relaxed))
    arm_means_stop_.store(false, std::memory_order_relaxed);
  if (armed_since_wait_.load(std::memory_order_relaxed))
    armed_since_wait_.store(false, std::memory_order_relaxed);
  if (ch.listed()) return true;
  Policy p(*this);
  if (!ch.listed()) {
    channels_.push_back(&ch);
    ch.set_listed(true);
    ch.watch_port(rx_fds_, !rx_watched_);
  }
  return true;
}

void Engine::app_sleeps() {
  Policy p(*this);
  p->on_app_sleeps();
}

void Engine::forget_channel(CompChannel& ch) {
  if (!ch.listed()) return;
  std::lock_guard<std::mutex> g(pmu_);
  std::erase(channels_, &ch);
  ch.set_listed(false);
}

void Engine::wait_end() {
  const transport::Time now = monotonic_now();
  Policy p(*this);
  p->on_wait_end(now);
}

void Engine::release_held(transport::Time now) {
  // (Unless they wait for its post: Datapath::Hold::kUntilPost, whose deadline is later.)
  if (now < dp_.hold_deadline()) return;
  // Not if that means waiting: an application's poll or post never waits behind a receive pass.
  // The pass holding the lock flushes before it lets go (the engine's), or holds them for this
  // thread's next call (another application thread's), and the engine's next look sends them.
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (g.owns_lock()) dp_.tx_flush(now);
}

void Engine::run() {
  constexpr int kMaxEvents = 8;
  epoll_event evs[kMaxEvents];
  Port& port = dp_.port();
  const bool poll_mode = port.caps().poll_mode;
  bool again = false;
  bool armed = false;  // poll mode: the port's receive interrupts are enabled
  transport::Time last_active = monotonic_now();
  transport::Time backoff = kMinBackoffNs;
  // Set when a wake-up was left to the polling application (Progress::skip_timer_wake): the
  // engine looks again by then even if nobody re-arms its timer.
  transport::Time look_again = transport::kNever;
  while (!stop_.load(std::memory_order_relaxed)) {
    int timeout = again ? 0 : -1;
    const transport::Time t = monotonic_now();
    Progress::Look look;
    {
      Policy p(*this);
      look = p->on_engine_look(t);
      if (look.lapsed && handoff_lapses_) handoff_lapses_->add();
      // A program that armed its CQ and then went a handoff without polling or waiting in
      // ibv_get_cq_event sleeps elsewhere: its next arms hand the receive side over (on_arm).
      if (look.lapsed && armed_since_wait_.load(std::memory_order_relaxed))
        arm_means_stop_.store(true, std::memory_order_relaxed);
    }
    if (poll_mode && !again) {
      // A poll-mode port shows frames only to rx_burst(): poll while traffic flows; when idle,
      // sleep on its receive interrupts, else on a timer that backs off to kMaxBackoffNs.
      if (look.defer) {
        // An application thread polls (poll_from_app): it receives and runs due timers itself.
        // The engine neither spins nor sleeps on receive interrupts then — an interrupt per
        // arrival would wake it to race the poller for the receive lock and preempt it on a
        // core (measured on memif: ~15% of a core and a 2-byte round trip twice as long) — but
        // sleeps until the handoff would lapse (Progress::on_engine_look armed the timer).
        if (armed) {
          port.disarm_wait();
          armed = false;
        }
        backoff = kMinBackoffNs;
      } else if (!look.app_polls && t - last_active < kSpinNs) {
        timeout = 0;
      } else if (!armed && port.arm_wait()) {
        // Idle, or receiving beside a polling application (which spins too: the engine must not).
        armed = true;
        timeout = 0;  // one more pass: what arrived before arming raised no interrupt
      } else if (!armed) {
        Policy p(*this);
        p->back_off_until(t + backoff);
        backoff = std::min(backoff * 2, kMaxBackoffNs);
      }
    }
    // The pass right after a lapse looks at what is waiting now, not at what arrives later.
    if (look.lapsed) timeout = 0;
    if (timeout < 0 && look_again != transport::kNever) {
      // Whole milliseconds, rounded up: not before the handoff would lapse, at most a millisecond
      // after it when nobody re-armed the timer meanwhile.
      const transport::Time left = look_again > t ? look_again - t : 0;
      timeout = static_cast<int>(std::min<transport::Time>((left + 999'999) / 1'000'000, 1000));
    }
    look_again = transport::kNever;
    int n = epoll_wait(epfd_, evs, kMaxEvents, timeout);
    if (n < 0 && errno != EINTR) break;  // cannot happen with valid fds
    if (n > 0 || timeout != 0) wakeups_.fetch_add(1, std::memory_order_relaxed);
    bool link_changed = false;
    bool rx_woke = false;     // the port's receive fds (sockets, receive interrupts) woke it
    bool timer_only = n > 0;  // its timer woke it, and nothing else did
    for (int i = 0; i < n; ++i) {
      int fd = evs[i].data.fd;
      if (fd == timerfd_) {
        drain(fd);
        continue;
      }
      timer_only = false;
      if (fd == control_fd_) {
        if (port.on_control()) link_changed = true;
      } else if (fd == doorbell_) {
        drain(fd);
      } else {
        rx_woke = true;
      }
    }
    if (timer_only && !again) {
      Policy p(*this);
      if (p->skip_timer_wake(monotonic_now(), &look_again)) continue;
    }
    if (armed && timeout != 0) {
      port.disarm_wait();  // woken: busy again until a pass finds nothing
      armed = false;
    }
    if (stop_.load(std::memory_order_relaxed)) break;

    {
      std::lock_guard<std::mutex> rx_guard(rx_mu_);
      std::span<const RxPacket> rx = dp_.rx_burst(monotonic_now());
      std::lock_guard<std::mutex> g(mu_);
      transport::Time now = monotonic_now();
      if (engine_passes_) engine_passes_->add();
      Progress::Pass p;
      p.received = rx.size();
      p.rx_woke = rx_woke;
      p.silent = ends_silent_write(rx);
      if (p.silent) p.sent_data = dp_.take_sent_data();
      p.held_for_post = dp_.held_for_post();
      p.hold_limit = dp_.hold_limit();
      bool hold, takeover;
      {
        Policy pol(*this);
        pol->on_poll_result(app_found_.load(std::memory_order_relaxed));
        hold = pol->on_engine_pass(now, p, &takeover);
      }
      if (takeover && rx_takeovers_) rx_takeovers_->add();
      // ib_write_lat: the ACK of a WRITE its target learns of from memory waits for that
      // target's next post (Progress::on_engine_pass says when). Held packets that have waited
      // Datapath::kMaxHoldNs leave now.
      dp_.set_hold(hold ? Datapath::Hold::kUntilPost : Datapath::Hold::kOff);
      if (!hold) dp_.release_post_hold();
      transport::Time next = pass(rx, now, &again, &link_changed);
      dp_.set_hold(Datapath::Hold::kOff);
      // This thread sends them if no call comes.
      next = std::min(next, dp_.hold_limit());
      {
        Policy pol(*this);
        pol->on_engine_pass_done(next);
      }
      if (!rx.empty() || again) {
        last_active = now;
        backoff = kMinBackoffNs;
      }
    }
    if (link_changed) client_.on_link_change();
  }
  if (armed) port.disarm_wait();
}

bool Engine::poll_from_app(bool wait_for_receiver) {
  // One clock read serves the whole empty pass: an empty poll is the loop a busy-polling
  // application spins in, and three reads were a third of it (memif profile).
  const transport::Time now = monotonic_now();
  // Recorded without the policy lock: the empty poll is the loop a busy-polling application
  // spins in, and it must never wait for a thread the scheduler took off its core while holding
  // that lock (measured: lapses of 4 ms, a round trip 40x longer). The policy folds it in at its
  // next decision; only when this poll has a decision due (the first poll after the engine
  // received, or a guard push) does it try the lock itself.
  app_poll_at_.store(now, std::memory_order_relaxed);
  if (state_.load(std::memory_order_relaxed) == Progress::State::kEngine ||
      now >= push_at_.load(std::memory_order_relaxed)) {
    Policy p(*this, std::try_to_lock);
  }
  // What the last application pass held (its ACKs) leaves now: this thread did not post.
  release_held(now);
  std::unique_lock<std::mutex> rx_guard(rx_mu_, std::defer_lock);
  if (wait_for_receiver)
    rx_guard.lock();
  else if (!rx_guard.try_lock())
    return false;
  std::span<const RxPacket> rx = dp_.rx_burst(now);
  if (rx.empty()) {
    // Nothing received; but a timer may be due (a paced QP's next release, a retransmission,
    // a coalesced ACK): the polling thread runs it now rather than wait for the engine thread
    // to be scheduled, which on a loaded machine takes milliseconds.
    // (Or the port has work that no deadline announced — an ARP request to answer, a resolved
    // neighbour's held packets: with the engine thread asleep behind the guard, nobody else
    // would send them.)
    const auto work_due = [&] {
      return work_at_.load(std::memory_order_relaxed) <= now || dp_.port().wants_poll();
    };
    if (work_due()) {
      // Not if that means waiting (a CQ poll never waits behind a pass): the next poll looks
      // again, and the holder — an engine pass — runs what is due itself.
      std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
      if (g.owns_lock() && work_due()) {
        if (app_passes_) app_passes_->add();
        bool again = false, link_changed = false;
        const transport::Time next = pass(rx, now, &again, &link_changed);
        {
          Policy p(*this);
          p->on_app_pass_done(next, now);
        }
        if (again || link_changed) kick();
        return true;
      }
    }
    // Receive fault injection may have taken what arrived and held it back (UROCE_FAULTS delay,
    // reorder): the engine thread, which no longer sees the socket readable, must wake for it.
    transport::Time held = dp_.rx_fault_deadline();
    if (held != transport::kNever) {
      Policy p(*this, std::try_to_lock);  // else the next poll does it
      if (p.owns()) p->on_deadline(held);
    }
    return false;
  }
  // The time read before the receive serves the pass too (a burst's receive takes microseconds at
  // most; a second read was ~2 % of a memif round trip's CPU on each side), unless this thread
  // had to wait for the lock.
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  transport::Time t = now;
  if (!g.owns_lock()) {
    g.lock();
    t = monotonic_now();
  }
  if (app_passes_) app_passes_->add();
  bool again = false, link_changed = false;
  // The few packets this pass produces (ACKs) wait for this thread's next call, which is
  // typically the reply it posts: one burst, not two (Datapath::set_hold); the ACK of a WRITE it
  // will learn of from memory, for its next post (Progress::on_engine_pass says why).
  const bool silent = ends_silent_write(rx);
  const bool sent_data = silent && dp_.take_sent_data();
  bool for_post = false;
  {
    // The application received for itself: while the engine receives beside it, that counts
    // against doing so.
    Policy p(*this);
    p->on_app_received();
    if (silent) for_post = p->on_app_silent_write(sent_data);
  }
  dp_.set_hold(for_post ? Datapath::Hold::kUntilPost : Datapath::Hold::kUntilNextCall);
  transport::Time next = pass(rx, t, &again, &link_changed);
  dp_.set_hold(Datapath::Hold::kOff);
  {
    Policy p(*this);
    p->on_app_pass_done(next, t);
  }
  // The engine thread reports link changes (it runs on_link_change without locks).
  if (again || link_changed) kick();
  return true;
}

}  // namespace uroce
