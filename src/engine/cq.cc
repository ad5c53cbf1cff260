// Completion queues, completion channels and the async event queue.
//
// The channel and the async queue use an eventfd in semaphore mode whose counter equals the number
// of queued events: poll/epoll see it readable exactly while an event waits, and a read takes one
// event's token. The token is written after the event is queued, under the queue's lock, so a
// successful read always finds an event to dequeue. The async queue's fd is that eventfd, and the
// kernel applies its O_NONBLOCK flag to the read, so a blocking or non-blocking get behaves as
// the application configured the fd (as with the kernel's uverbs event files). A completion
// channel's fd is an epoll fd over its eventfd (cq.h says why); its gets read the flag and wait
// themselves.
#include "engine/cq.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ctime>

#include <cerrno>
#include <system_error>

namespace uroce {
namespace {

int make_event_fd(int flags = 0) {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE | flags);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  return fd;
}

void set_in_epoll(int epfd, int fd, bool on) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  // Cannot fail for valid fds short of ENOMEM (ADD); a failed ADD leaves the application woken
  // by the engine's events, as when the set does not watch the port.
  epoll_ctl(epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd, &ev);
}

// Takes one token from a semaphore eventfd; 0, EAGAIN when non-blocking and empty, or EINTR when
// a signal interrupted the wait. EINTR is returned, not retried: libibverbs' ibv_get_cq_event and
// ibv_get_async_event are a read() of the event file, and a program that ends its wait with a
// signal (an alarm, a timeout) relies on seeing -1 with errno EINTR (signal(7)).
int take_token(int fd) {
  uint64_t v;
  ssize_t r = read(fd, &v, sizeof v);
  if (r == static_cast<ssize_t>(sizeof v)) return 0;
  return r < 0 ? errno : EIO;
}

void give_token(int fd, uint64_t n = 1) {
  // Cannot fail short of 2^64-2 unread events.
  ssize_t r = write(fd, &n, sizeof n);
  (void)r;
}

}  // namespace

CompChannel::CompChannel() : event_fd_(make_event_fd(EFD_NONBLOCK)) {
  fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    close(event_fd_);
    throw std::system_error(e, std::generic_category(), "epoll_create1");
  }
  set_in_epoll(fd_, event_fd_, true);
}

CompChannel::~CompChannel() {
  close(fd_);
  close(event_fd_);
}

void CompChannel::watch_port(std::span<const int> wait_fds, bool on) {
  if (on == watching()) return;
  for (int fd : wait_fds) set_in_epoll(fd_, fd, on);
  watching_.store(on, std::memory_order_relaxed);
}

thread_local const CompChannel* CompChannel::taking_ = nullptr;
thread_local uint64_t CompletionPass::current_ = 0;

namespace {
std::atomic<uint64_t> next_pass{1};
}

CompletionPass::CompletionPass() : outer_(current_) {
  if (current_ == 0) current_ = next_pass.fetch_add(1, std::memory_order_relaxed);
}

CompletionPass::~CompletionPass() {
  current_ = outer_;
}

void CompChannel::notify(void* cq_cookie) {
  std::lock_guard<std::mutex> g(mu_);
  events_.push_back(cq_cookie);
  if (taking_ == this)
    ++silent_;  // this thread takes it next (Taking): no token to write and read back
  else
    give_token(event_fd_);
}

int CompChannel::try_get_event(void** cq_cookie) {
  std::lock_guard<std::mutex> g(mu_);
  if (events_.empty()) return EAGAIN;
  // The eventfd holds a token for each queued event but the silent ones; every reader takes one
  // only here, with its event: the read finds it and does not block.
  if (silent_ > 0) {
    --silent_;
  } else if (int rc = take_token(event_fd_); rc != 0) {
    return rc;
  }
  *cq_cookie = events_.front();
  events_.pop_front();
  return 0;
}

CompChannel::Taking::Taking(CompChannel& ch) : ch_(ch), outer_(taking_) {
  taking_ = &ch;
}

CompChannel::Taking::~Taking() {
  taking_ = outer_;
  // Events this thread raised and left queued get their tokens now: the fd is readable again
  // exactly while an event is queued, for the program's poll() and other threads' gets.
  std::lock_guard<std::mutex> g(ch_.mu_);
  if (ch_.silent_ > 0) give_token(ch_.event_fd_, ch_.silent_);
  ch_.silent_ = 0;
}

bool CompChannel::nonblocking() const {
  const int fl = fcntl(fd_, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

int CompChannel::get_event(void** cq_cookie) {
  for (;;) {
    if (int rc = try_get_event(cq_cookie); rc != EAGAIN) return rc;
    if (nonblocking()) return EAGAIN;
    // Sleep until an event is queued (the fd becomes readable), as a read of the kernel's event
    // file would; a signal ends the wait with EINTR (take_token says why).
    pollfd p{event_fd_, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno == EINTR) return EINTR;
  }
}

size_t CompChannel::pending() {
  std::lock_guard<std::mutex> g(mu_);
  return events_.size();
}

Cq::Cq(uint32_t cqe, CompChannel* channel, void* cookie, AsyncEventQueue* errors, bool timestamps)
    : cqe_(cqe), channel_(channel), cookie_(cookie), errors_(errors), stamp_(timestamps) {}

void Cq::push(const ibv_wc& wc) {
  push(wc, false);
}

void Cq::push(const ibv_wc& wc, bool solicited) {
  bool fire = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (overrun_.load(std::memory_order_relaxed)) return;  // in error: no more completions
    if (ring_.size() >= cqe_) {
      // IBTA C11-37: the CI generates a CQ error when it detects an overrun; the completion is
      // lost. The ring is never grown past its capacity.
      overrun_.store(true, std::memory_order_relaxed);
      if (errors_ != nullptr) {
        ibv_async_event ev{};
        ev.event_type = IBV_EVENT_CQ_ERR;
        ev.element.cq = static_cast<ibv_cq*>(cookie_);
        errors_->push(ev);  // its own lock, never taken before this CQ's
      }
      return;
    }
    // Stamped once it is sure to be queued, and only when the CQ can report it: the clock read
    // was ~4% of a small message's round trip (bench/path_bench).
    uint64_t ts = 0;
    if (stamp_) {
      timespec now{};
      clock_gettime(CLOCK_MONOTONIC, &now);
      ts = static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
    }
    ring_.push_back(Entry{wc, ts});
    count_.store(ring_.size(), std::memory_order_release);
    // ibv_req_notify_cq(3): with solicited_only, an event fires for a solicited receive
    // completion or for any unsuccessful completion; otherwise for any new completion. Arming is
    // one-shot (IBTA C11-?: the CQ is re-armed by the consumer after each event).
    const bool wakes_solicited = solicited || wc.status != IBV_WC_SUCCESS;
    const uint64_t pass = CompletionPass::current();
    if (arm_ == Arm::kNext || (arm_ == Arm::kSolicited && wakes_solicited)) {
      arm_ = Arm::kNone;
      fire = channel_ != nullptr;
      fired_pass_ = pass;
    } else if (pass == 0 || pass != fired_pass_) {
      missed_ = true;
      missed_solicited_ |= wakes_solicited;
    }  // else queued in the pass whose event is on its way: that event covers it
  }
  if (fire) channel_->notify(cookie_);
}

int Cq::poll(int n, ibv_wc* out) {
  return poll(n, out, nullptr);
}

int Cq::poll(int n, ibv_wc* out, uint64_t* ts_ns) {
  if (n <= 0) return 0;
  // Pairs with the release in push(): a count that says "one" comes with the entry's bytes.
  if (count_.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard<std::mutex> g(mu_);
  int k = 0;
  while (k < n && !ring_.empty()) {
    if (ts_ns) ts_ns[k] = ring_.front().ts_ns;
    out[k++] = ring_.front().wc;
    ring_.pop_front();
  }
  if (ring_.empty()) missed_ = missed_solicited_ = false;  // the application has seen them all
  // The application has looked since the last event: a completion its pass queues from now on is
  // not covered by that event (CompletionPass) — it may have polled before that completion came.
  if (k > 0) fired_pass_ = 0;
  count_.store(ring_.size(), std::memory_order_relaxed);
  return k;
}

int Cq::req_notify(bool solicited_only) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (channel_ == nullptr) return EINVAL;  // nothing could ever be notified
    // A completion queued while the CQ was not armed (for it), and not polled since, fires the
    // arming at once, as ConnectX does: it arms relative to the consumer index, and a CQE past
    // that index raises the event. Programs count on it. UCX polls its CQs until empty, then
    // drains its channel with a non-blocking ibv_get_cq_event — whose receive pass here can
    // complete a message (Device::get_cq_event) — and only then arms and sleeps: with arming
    // for the next completion alone (as the IBTA words it, and rxe does) the completion that pass
    // queued woke nobody, and ucx_perftest -E sleep hung on both sides at its first message. A
    // completion that raised an event, or that the application polled, does not fire an arming
    // again.
    const bool missed = solicited_only ? missed_solicited_ : missed_;
    if (!missed) {
      // Arming for "next" subsumes an earlier "solicited" arming, never the other way round.
      if (!solicited_only)
        arm_ = Arm::kNext;
      else if (arm_ == Arm::kNone)
        arm_ = Arm::kSolicited;
      return 0;
    }
    arm_ = Arm::kNone;
    missed_ = missed_solicited_ = false;
  }
  channel_->notify(cookie_);
  return 0;
}

int Cq::resize(uint32_t cqe) {
  std::lock_guard<std::mutex> g(mu_);
  if (cqe == 0 || cqe < ring_.size()) return EINVAL;
  cqe_ = cqe;
  return 0;
}

size_t Cq::clean(uint32_t qpn) {
  std::lock_guard<std::mutex> g(mu_);
  const size_t before = ring_.size();
  transport::Ring<Entry> kept;
  for (const Entry& e : ring_)
    if (e.wc.qp_num != qpn) kept.push_back(e);
  if (kept.size() != before) ring_ = std::move(kept);
  if (ring_.empty()) missed_ = missed_solicited_ = false;
  count_.store(ring_.size(), std::memory_order_relaxed);
  return before - ring_.size();
}

bool Cq::overrun() const {
  return overrun_.load(std::memory_order_relaxed);
}

size_t Cq::size() const {
  return count_.load(std::memory_order_acquire);
}

AsyncEventQueue::AsyncEventQueue() : fd_(make_event_fd()) {}
AsyncEventQueue::~AsyncEventQueue() {
  close(fd_);
}

void AsyncEventQueue::push(const ibv_async_event& ev) {
  std::lock_guard<std::mutex> g(mu_);
  q_.push_back(ev);
  give_token(fd_);
}

int AsyncEventQueue::get(ibv_async_event* ev) {
  int rc = take_token(fd_);
  if (rc != 0) return rc;
  std::lock_guard<std::mutex> g(mu_);
  *ev = q_.front();
  q_.pop_front();
  return 0;
}

}  // namespace uroce
