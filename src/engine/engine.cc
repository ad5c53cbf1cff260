#include "engine/engine.h"

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

void drain(int fd) {
  uint64_t v;
  while (read(fd, &v, sizeof v) > 0) {
  }
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
  std::vector<int> fds(dp_.port().wait_fds().begin(), dp_.port().wait_fds().end());
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
  if (deadline < armed_) arm_timer(deadline);
}

void Engine::arm_timer(transport::Time deadline) {
  armed_ = deadline;
  itimerspec its{};
  if (deadline != transport::kNever) {
    // A deadline of 0 would disarm the timer; anything in the past fires immediately.
    transport::Time d = deadline == 0 ? 1 : deadline;
    its.it_value.tv_sec = static_cast<time_t>(d / 1000000000ull);
    its.it_value.tv_nsec = static_cast<long>(d % 1000000000ull);
  }
  timerfd_settime(timerfd_, TFD_TIMER_ABSTIME, &its, nullptr);
}

transport::Time Engine::pass(std::span<const RxPacket> rx, transport::Time now, bool* again) {
  if (!rx.empty()) client_.on_packets(rx, now);
  *again = false;
  dp_.port().poll(now);
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

void Engine::run() {
  constexpr int kMaxEvents = 8;
  epoll_event evs[kMaxEvents];
  bool again = false;
  while (!stop_.load(std::memory_order_relaxed)) {
    // Sleep unless the last pass left work ready; level-triggered, so pending datagrams or a
    // rung doorbell return at once.
    int n = epoll_wait(epfd_, evs, kMaxEvents, again ? 0 : -1);
    if (n < 0 && errno != EINTR) break;  // cannot happen with valid fds
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
      int fd = evs[i].data.fd;
      if (fd == control_fd_) {
        if (dp_.port().on_control()) client_.on_link_change();
      } else if (fd == doorbell_ || fd == timerfd_) {
        drain(fd);
      }
    }
    if (stop_.load(std::memory_order_relaxed)) break;

    std::lock_guard<std::mutex> rx_guard(rx_mu_);
    std::span<const RxPacket> rx = dp_.rx_burst(monotonic_now());
    std::lock_guard<std::mutex> g(mu_);
    transport::Time now = monotonic_now();
    transport::Time next = pass(rx, now, &again);
    if (next != armed_) arm_timer(next);
  }
}

bool Engine::poll_from_app() {
  std::unique_lock<std::mutex> rx_guard(rx_mu_, std::try_to_lock);
  if (!rx_guard.owns_lock()) return false;
  std::span<const RxPacket> rx = dp_.rx_burst(monotonic_now());
  if (rx.empty()) {
    // Receive fault injection may have taken what arrived and held it back (UROCE_FAULTS delay,
    // reorder): the engine thread, which no longer sees the socket readable, must wake for it.
    transport::Time held = dp_.rx_fault_deadline();
    if (held != transport::kNever) {
      std::lock_guard<std::mutex> g(mu_);
      if (held < armed_) arm_timer(held);
    }
    return false;
  }
  std::lock_guard<std::mutex> g(mu_);
  bool again = false;
  transport::Time next = pass(rx, monotonic_now(), &again);
  if (next < armed_) arm_timer(next);
  if (again) kick();
  return true;
}

}  // namespace uroce
