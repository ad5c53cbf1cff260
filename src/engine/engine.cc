#include "engine/engine.h"

#include "engine/signals.h"

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
// application thread that polled within the handoff time (Engine::kDefaultHandoffNs) drives
// progress itself (poll_from_app), so the engine does not spin against it.
constexpr transport::Time kSpinNs = 50'000;
constexpr transport::Time kMinBackoffNs = 20'000;
// The longest a polling application's guard runs (Engine::push_guard): how long the engine
// thread may take, at worst, to notice that an application which polled steadily stopped
// without saying so (no CQ armed, no completion channel) — and so how long arrivals, and ACKs
// its last pass held for its next call, may wait then. Below the 5 ms after which a peer's
// early-retransmit probe fires (kPtoFloorNs, completer.cc), and far inside RC's ACK timeouts
// (perftest and rdma_cm default to 67 ms and more). The application then re-arms the timer ~330
// times a second.
constexpr transport::Time kMaxGuardNs = 4'000'000;
// Receiving beside a polling application (Engine::run): the score it starts at and its ceiling.
constexpr int kBesideStart = 8, kBesideMax = 16;
constexpr transport::Time kMaxBackoffNs = 1'000'000;

// Whether `rx` holds an RC WRITE that ends a message without immediate data: one whose target
// learns of it only by watching memory (Datapath::Hold::kUntilPost).
bool ends_silent_write(std::span<const RxPacket> rx) {
  return std::any_of(rx.begin(), rx.end(), [](const RxPacket& p) {
    return p.pkt.bth.opcode == uint8_t(wire::Opcode::kRcWriteOnly) ||
           p.pkt.bth.opcode == uint8_t(wire::Opcode::kRcWriteLast);
  });
}

// Whether an application thread polled (at `last`, 0 for never) less than `span` before `now`.
// It may have polled after the caller read the clock: now - last would wrap.
bool polled_within(transport::Time last, transport::Time now, transport::Time span) {
  return last != 0 && (last >= now || now - last < span);
}

// An eventfd (not in semaphore mode) or a timerfd: one read takes its whole count and resets it.
void drain(int fd) {
  uint64_t v;
  ssize_t r = read(fd, &v, sizeof v);
  (void)r;  // EAGAIN: another pass took it first
}

}  // namespace

Engine::Engine(std::mutex& mu, Datapath& dp, Client& client, std::string thread_name)
    : mu_(mu), dp_(dp), client_(client), name_(std::move(thread_name)) {
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

void Engine::wake_by(transport::Time deadline) {
  if (deadline < work_at_.load(std::memory_order_relaxed))
    work_at_.store(deadline, std::memory_order_relaxed);
  // While guarded, the polling application thread runs it (poll_from_app); should that thread
  // stop, the guard wakes the engine thread, whose pass runs whatever is due.
  if (!guarded_.load(std::memory_order_relaxed) && deadline < armed_) arm_kernel(deadline);
}

void Engine::arm_timer(transport::Time deadline) {
  work_at_.store(deadline, std::memory_order_relaxed);
  guarded_.store(false, std::memory_order_relaxed);  // a polling application guards again
  arm_kernel(deadline);
}

void Engine::push_guard(transport::Time now) {
  const transport::Time handoff = handoff_ns_.load(std::memory_order_relaxed);
  // Never waits: the caller is an application's CQ poll, which must not wait behind a receive
  // pass (an RNIC's poll reads a ring). Whoever holds the lock is about to arm the timer anyway,
  // and the next poll pushes again (push_at_ stays due).
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return;
  // Each push re-arms the timerfd, which costs what a wake-up does on a VM (hrtimer
  // reprogramming: ~14 us here, against ~1 us for a re-arm right after another): so the span
  // doubles with every push the application made in time, from the handoff up to kMaxGuardNs.
  const transport::Time cap = std::max(handoff, kMaxGuardNs);
  guard_span_ = guarded_.load(std::memory_order_relaxed) ? std::min(guard_span_ * 2, cap) : handoff;
  arm_kernel(now + guard_span_);
  guarded_.store(true, std::memory_order_relaxed);
  // The next push is due a handoff before the guard runs out (an eighth of the span when that is
  // more; all of a span shorter than the handoff, as after set_handoff_ns lengthened it): the
  // guard then fires only when the application went a handoff without polling, the lapse it is
  // there to catch. With an eighth alone (0.5 ms of 4 ms) it also fired between the polls of a
  // sender posting to 8 QPs over sockets (0.5-1 ms apart ~1 700 times in a 5 s run), and its
  // wake-up took that sender for gone and split its work between two threads
  // (docs/performance.md, "8 QPs over sockets").
  const transport::Time slack = std::min(guard_span_, std::max(guard_span_ / 8, handoff));
  push_at_.store(now + guard_span_ - slack, std::memory_order_relaxed);
}

void Engine::arm_kernel(transport::Time deadline) {
  if (deadline == armed_) return;  // set already
  armed_ = deadline;
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

transport::Time Engine::pass(std::span<const RxPacket> rx, transport::Time now, bool* again,
                             bool* link_changed) {
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

void Engine::watch_rx(bool on) {
  for (int fd : rx_fds_) {
    epoll_event ev{};
    ev.events = on ? uint32_t{EPOLLIN} : 0u;
    ev.data.fd = fd;
    epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
  }
  rx_watched_ = on;
}

void Engine::stop_polling() {
  // What its passes held for its next call leaves before it sleeps, not at the engine's pass.
  release_held(monotonic_now());
  // The engine's pass on the kick arms the timer for the work due (arm_timer ends the guard).
  if (last_app_poll_.exchange(0, std::memory_order_relaxed) != 0) kick();
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
  // Receiving beside a polling application. The handoff (below) trusts an application thread
  // that polled within the handoff time to receive; one that polls only now and then and spins
  // elsewhere in between breaks that trust — ib_write_lat polls its send CQ, then spins on the
  // memory the peer's next WRITE will fill, and that WRITE waited for the handoff to lapse (a
  // typical latency of 250-430 us instead of 5-10). Evidence of it: a pass of the engine's own
  // (a timer's, or the first after the handoff lapsed) finds arrivals waiting while the
  // application's last poll took a completion and was more than the left time (kDefaultLeftNs:
  // a thread that polls a CQ in a loop polls again within microseconds) ago. The engine then
  // receives on arrival (a wake-up each) even while that application polls, and goes back to
  // leaving the receive side to it when its wake-ups are mostly not needed — the application
  // spins on an empty CQ: a needed wake-up scores +4, another -1, and so does each receive the
  // application makes itself (poll_from_app), from kBesideStart up to kBesideMax; at 0 it stops.
  bool was_app_polling = false, lapsed = false;
  // Set when a wake-up was left to the polling application (below): the engine looks again by
  // then even if nobody re-arms its timer.
  transport::Time look_again = transport::kNever;
  // The timer set no later than `deadline`. timer_at_ mirrors armed_ (arm_kernel), so the device
  // lock, which a polling application holds in its passes, is taken only when the timer must
  // move (a guarding application keeps it earlier: push_guard).
  const auto look_by = [this](transport::Time deadline) {
    if (guarded_.load(std::memory_order_relaxed) ||
        deadline >= timer_at_.load(std::memory_order_relaxed))
      return;
    std::lock_guard<std::mutex> g(mu_);
    if (!guarded_.load(std::memory_order_relaxed) && deadline < armed_) arm_kernel(deadline);
  };
  while (!stop_.load(std::memory_order_relaxed)) {
    int timeout = again ? 0 : -1;
    const transport::Time handoff = handoff_ns_.load(std::memory_order_relaxed);
    const transport::Time t = monotonic_now();
    const transport::Time last = last_app_poll_.load(std::memory_order_relaxed);
    // (An application thread that polled after this thread read the clock polls: no lapse.)
    const bool app_polls = polled_within(last, t, handoff);
    // The application said it stopped polling (stop_polling); or poll_from_app ended it.
    if (last == 0) beside_score_.store(0, std::memory_order_relaxed);
    const bool beside = beside_score_.load(std::memory_order_relaxed) > 0;
    if (was_app_polling && !app_polls && last != 0) {
      lapsed = true;
      if (handoff_lapses_) handoff_lapses_->add();
    }
    was_app_polling = app_polls;
    // The engine leaves receiving to the application thread that polls.
    const bool defer = app_polls && !beside;
    if (!poll_mode && !rx_fds_.empty()) {
      // Receive handoff. While an application thread busy-polls a CQ it receives itself
      // (poll_from_app); an engine that also woke for every datagram would only race it for the
      // receive lock and for two cores — measured: one engine wake-up per packet received. So
      // the engine stops watching the port while the application polled within the handoff time
      // and takes the receive side back when it stops (stop_polling: it armed a CQ or waits on a
      // channel) or fell silent for that long; datagrams that arrived meanwhile are still there
      // (level-triggered).
      if (defer != !rx_watched_) watch_rx(!defer);
      if (defer) look_by(last + handoff);
    }
    if (poll_mode && !again) {
      // A poll-mode port shows frames only to rx_burst(): poll while traffic flows; when idle,
      // sleep on its receive interrupts, else on a timer that backs off to kMaxBackoffNs.
      if (defer) {
        // An application thread polls (poll_from_app): it receives and runs due timers itself.
        // The engine neither spins nor sleeps on receive interrupts then — an interrupt per
        // arrival would wake it to race the poller for the receive lock and preempt it on a
        // core (measured on memif: ~15% of a core and a 2-byte round trip twice as long) — but
        // sleeps until the handoff would lapse, when it looks again.
        if (armed) {
          port.disarm_wait();
          armed = false;
        }
        look_by(last + handoff);
        backoff = kMinBackoffNs;
      } else if (!app_polls && t - last_active < kSpinNs) {
        timeout = 0;
      } else if (!armed && port.arm_wait()) {
        // Idle, or receiving beside a polling application (which spins too: the engine must not).
        armed = true;
        timeout = 0;  // one more pass: what arrived before arming raised no interrupt
      } else if (!armed) {
        std::lock_guard<std::mutex> g(mu_);
        if (t + backoff < armed_) arm_kernel(t + backoff);
        backoff = std::min(backoff * 2, kMaxBackoffNs);
      }
    }
    // The pass right after a lapse looks at what is waiting now, not at what arrives later.
    if (lapsed) timeout = 0;
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
    if (timer_only && defer && !lapsed && !again) {
      // Its timer alone woke it while an application thread polls, and that thread polled a
      // moment ago: it receives, runs the due timers (the clock has passed work_at_) and guards
      // the handoff itself (poll_from_app). A pass here would only contend with it for the receive
      // and device locks — a futex wake-up on each side, and the application thread preempted
      // (measured in a memif ping-pong: ~1 700 wake-ups, 2 400 futex calls and 2 300 timer
      // re-arms a second, the application threads waiting for their cores 5 % of the time). The
      // engine looks again when the handoff would lapse, whoever re-arms the timer meanwhile.
      const transport::Time now = monotonic_now();
      const transport::Time polled = last_app_poll_.load(std::memory_order_relaxed);
      if (polled_within(polled, now, left_ns_.load(std::memory_order_relaxed))) {
        // Its guard (push_guard) wakes the engine should it stop; without one, look then.
        if (!guarded_.load(std::memory_order_relaxed)) look_again = polled + handoff;
        continue;
      }
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
      // Whether the application is spinning on an empty CQ now (it will take what arrives), or
      // took a completion and has not polled for the left time (it is spinning elsewhere).
      const transport::Time polled = last_app_poll_.load(std::memory_order_relaxed);
      const bool recent = polled != 0 && (polled >= now ||
                                          now - polled <= left_ns_.load(std::memory_order_relaxed));
      const bool found = app_found_.load(std::memory_order_relaxed);
      if ((lapsed || defer) && !beside && !rx.empty() && found && !recent) {
        // Packets were left waiting for an application that took a completion and went away.
        beside_score_.store(kBesideStart, std::memory_order_relaxed);
        if (rx_takeovers_) rx_takeovers_->add();
      } else if (beside && app_polls && rx_woke) {
        // An arrival woke the engine: needed if it found packets the application was not
        // there to take; not if it found none, or the application spins on its CQ anyway.
        const bool needed = !rx.empty() && !(recent && !found);
        score_beside(needed ? 4 : -1);
      }
      lapsed = false;
      // ib_write_lat: each side spins on memory for the peer's WRITE and posts its own the
      // moment it lands. An ACK sent at once ends the peer's CQ poll before that WRITE comes, so
      // each WRITE then lands while nobody polls and waits for the engine thread to be scheduled
      // (typical 24-115 us a round trip over memif, 58-90 over sockets, a 1-2 ms tail at each
      // handoff lapse). Held for the application's post (Datapath::Hold::kUntilPost), the ACK
      // goes with that WRITE and the peer, still polling, takes both in one pass of its own
      // (2-5 us). Only while an application thread is about: it polled within the handoff time,
      // or it posted since the last such WRITE came (replied_) — a WRITE that takes longer than
      // the handoff time to receive (ib_write_lat -s 256K: ~1 ms here) leaves its target's last
      // poll further back than that, and without the hold each WRITE after the first was
      // received by this thread alone (typical 1.27 ms one way for 256 KiB, ib_send_lat 0.39);
      // a target that never posts (ib_write_bw's) never has its WRITEs' ACKs held. Held packets
      // that have waited Datapath::kMaxHoldNs leave now.
      const bool silent = ends_silent_write(rx);
      if (silent) replied_ = dp_.take_sent_data();
      const bool present = polled_within(polled, now, handoff) || replied_;
      const bool hold = present && now < dp_.hold_limit() && (dp_.held_for_post() || silent);
      dp_.set_hold(hold ? Datapath::Hold::kUntilPost : Datapath::Hold::kOff);
      if (!hold) dp_.release_post_hold();
      transport::Time next = pass(rx, now, &again, &link_changed);
      dp_.set_hold(Datapath::Hold::kOff);
      // This thread sends them if no call comes.
      next = std::min(next, dp_.hold_limit());
      arm_timer(next);
      if (!rx.empty() || again) {
        last_active = now;
        backoff = kMinBackoffNs;
      }
    }
    if (link_changed) client_.on_link_change();
  }
  if (armed) port.disarm_wait();
}

void Engine::app_pass_done(transport::Time next, transport::Time now) {
  work_at_.store(next, std::memory_order_relaxed);
  // This thread runs it when due; the guard covers its going away.
  if (guarded_.load(std::memory_order_relaxed)) return;
  // Unguarded (the engine receives beside this application, which then leaves its timers to
  // it): the timer the pass just ran must not still wake the engine thread, but it must wake by
  // the handoff time. An application that stops calling uroce without saying so (ib_write_lat
  // spins on memory) leaves the receive side to the engine, which no longer watches the sockets
  // while an application polls: were its timer pushed out to a QP's ACK timeout, arrivals (and
  // held ACKs) would wait that long, and the peer's retries could run out.
  next = std::min(next, now + handoff_ns_.load(std::memory_order_relaxed));
  if (next < armed_ || armed_ <= now) arm_kernel(next);
}

void Engine::score_beside(int delta) {
  int s = beside_score_.load(std::memory_order_relaxed);
  // Only while receiving beside: a score of 0 stays 0 (entering sets kBesideStart).
  while (s > 0 && !beside_score_.compare_exchange_weak(s, std::clamp(s + delta, 0, kBesideMax),
                                                       std::memory_order_relaxed)) {
  }
}

bool Engine::poll_from_app() {
  // One clock read serves the whole empty pass: an empty poll is the loop a busy-polling
  // application spins in, and three reads were a third of it (memif profile).
  const transport::Time now = monotonic_now();
  last_app_poll_.store(now, std::memory_order_relaxed);
  // Now and then (push_guard) the timer moves to a lapse this poll sets (guarded_); not while
  // the engine receives beside this application, which leaves its timers to the engine.
  if ((!guarded_.load(std::memory_order_relaxed) ||
       now >= push_at_.load(std::memory_order_relaxed)) &&
      beside_score_.load(std::memory_order_relaxed) == 0)
    push_guard(now);
  // What the last application pass held (its ACKs) leaves now: this thread did not post.
  release_held(now);
  std::unique_lock<std::mutex> rx_guard(rx_mu_, std::try_to_lock);
  if (!rx_guard.owns_lock()) return false;
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
        app_pass_done(pass(rx, now, &again, &link_changed), now);
        if (again || link_changed) kick();
        return true;
      }
    }
    // Receive fault injection may have taken what arrived and held it back (UROCE_FAULTS delay,
    // reorder): the engine thread, which no longer sees the socket readable, must wake for it.
    transport::Time held = dp_.rx_fault_deadline();
    if (held != transport::kNever) {
      std::unique_lock<std::mutex> g(mu_, std::try_to_lock);  // else the next poll does it
      if (g.owns_lock()) wake_by(held);
    }
    return false;
  }
  // The application received for itself: while the engine receives beside it, that counts
  // against doing so (run()).
  score_beside(-1);
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
  // will learn of from memory, for its next post (run() says why).
  const bool silent = ends_silent_write(rx);
  if (silent) replied_ = dp_.take_sent_data();
  dp_.set_hold(silent ? Datapath::Hold::kUntilPost : Datapath::Hold::kUntilNextCall);
  transport::Time next = pass(rx, t, &again, &link_changed);
  dp_.set_hold(Datapath::Hold::kOff);
  app_pass_done(next, t);
  // The engine thread reports link changes (it runs on_link_change without locks).
  if (again || link_changed) kick();
  return true;
}

}  // namespace uroce
