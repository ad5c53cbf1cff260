#include "cm/service.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <random>

#include "cm/ip_cm.h"
#include "engine/engine.h"
#include "util/log.h"
#include "objects.h"
#include "provider.h"

namespace uroce::cm {
namespace {

uint8_t mtu_enum(uint16_t bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
    default:
      return IBV_MTU_1024;
  }
}

}  // namespace

namespace {
pid_t g_service_pid = 0;
}  // namespace

CmService& CmService::get() {
  static CmService* s = [] {
    g_service_pid = getpid();
    verbs::set_before_drain(&CmService::at_exit);
    return new CmService();  // never destroyed: see service.h
  }();
  return *s;
}

void CmService::at_exit() {
  if (getpid() != g_service_pid) return;
  CmService& s = get();
  std::unique_lock<std::mutex> g(s.mu_, std::defer_lock);
  for (int i = 0; i < 100 && !g.try_lock(); ++i) usleep(1000);
  if (!g.owns_lock()) return;
  const Time t = s.now();
  for (auto& p : s.ports_) {
    p->agent->destroy_all(t);
    s.drain(*p);
  }
}

const std::vector<verbs::VDevice*>& CmService::devices() {
  return verbs::devices();
}

Time CmService::now() const {
  return monotonic_now();
}

void CmService::set_handler(Handler h) {
  handler_ = std::move(h);
}

CmPort* CmService::port_by_ip(const wire::IpAddr& ip, int* err) {
  for (verbs::VDevice* d : devices())
    if (d->cfg.addr() == ip) return port_of(d, err);
  return nullptr;
}

CmPort* CmService::port_of(verbs::VDevice* vdev, int* err) {
  for (auto& p : ports_)
    if (p->vdev == vdev) return p.get();
  auto p = std::make_unique<CmPort>();
  p->vdev = vdev;
  p->ip = vdev->cfg.addr();
  p->scope_id = vdev->cfg.scope_id;
  p->ctx = verbs::open_device(&vdev->dev);
  if (!p->ctx) {
    *err = errno ? errno : ENODEV;
    return nullptr;
  }
  p->dev = verbs::to_v(p->ctx)->dev;
  p->pd = verbs::alloc_pd(p->ctx);
  int rc = 0;
  p->gsi = Gsi::open(p->dev, &rc);
  if (!p->gsi || !p->pd) {
    log().error("{}: cannot open the GSI QP for rdma_cm: {}", vdev->cfg.name,
                std::strerror(rc ? rc : ENOMEM));
    if (p->pd) verbs::dealloc_pd(p->pd);
    verbs::close_device(p->ctx);
    *err = rc ? rc : ENOMEM;
    return nullptr;
  }
  p->mtu_enum = mtu_enum(p->dev->mtu_bytes());
  p->gid = p->dev->gid();
  AgentConfig ac;
  ac.ca_guid = p->dev->guid();
  std::random_device rd;
  ac.first_comm_id = rd();
  if (PortShare* sh = p->dev->port_share()) {
    ac.comm_id_base = sh->comm_id_base();
    ac.comm_id_mask = sh->comm_id_count() - 1;
  }
  ac.tid_prefix = rd();
  p->agent = std::make_unique<Agent>(ac);
  CmPort* raw = p.get();
  ports_.push_back(std::move(p));
  start_thread();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = raw;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, raw->gsi->fd(), &ev);
  // Never removed: the port and the service live until the process exits.
  raw->dev->add_port_event_listener([this, raw](const PortEvent& e) {
    if (e.port_unreachable()) queue_unreachable(raw, e.dst_ip, e.dst_port);
  });
  return raw;
}

void CmService::queue_unreachable(CmPort* p, const wire::IpAddr& ip, uint16_t port) {
  {
    std::lock_guard<std::mutex> g(unreach_mu_);
    unreach_.push_back({p, ip, port});
  }
  uint64_t one = 1;
  ssize_t r = write(wakefd_, &one, sizeof one);
  (void)r;
}

void CmService::fail_unreachable(Time now) {
  std::vector<Unreachable> todo;
  {
    std::lock_guard<std::mutex> g(unreach_mu_);
    todo.swap(unreach_);
  }
  for (const Unreachable& u : todo) {
    // The kernel's CM would resend its REQ for seconds (~4.9 s with uroce's timeouts; ~70 s with
    // the kernel's) before RDMA_CM_EVENT_UNREACHABLE; port unreachable is final (RFC 1122
    // 4.1.3.3), so the attempt ends now, with -ECONNREFUSED (rdma_cm_events.cc).
    const size_t ended = u.port->agent->on_unreachable(u.ip, now);
    if (ended > 0 && told_unreachable_.insert(u.ip).second)
      log().warn(
          "rdma_cm: no RoCE endpoint at {} (ICMP port unreachable): a connection to it fails "
          "at once (RDMA_CM_EVENT_UNREACHABLE, status -ECONNREFUSED); is the peer program "
          "running, on a RoCE device with that address?",
          format_ip_port(u.ip, u.udp_port));
    drain(*u.port);
  }
}

void CmService::start_thread() {
  if (started_) return;
  started_ = true;
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  timerfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  wakefd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &timerfd_;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, timerfd_, &ev);
  ev.data.ptr = &wakefd_;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev);
  std::thread([this] { run(); }).detach();
}

void CmService::arm_timer() {
  Time d = kNever;
  for (auto& p : ports_) d = std::min(d, p->agent->next_deadline());
  itimerspec its{};
  if (d != kNever) {
    // An absolute CLOCK_MONOTONIC time; a deadline in the past fires at once (never 0: disarms).
    Time t = std::max<Time>(d, 1);
    its.it_value.tv_sec = static_cast<time_t>(t / 1'000'000'000);
    its.it_value.tv_nsec = static_cast<long>(t % 1'000'000'000);
  }
  timerfd_settime(timerfd_, TFD_TIMER_ABSTIME, &its, nullptr);
}

void CmService::drain(CmPort& p) {
  if (flushing_) return;  // a handler called the agent: the loop below picks it up
  flushing_ = true;
  for (;;) {
    auto mads = p.agent->take_mads();
    for (auto& m : mads) p.gsi->send(m.dst_ip, m.mad);
    auto events = p.agent->take_events();
    if (mads.empty() && events.empty()) break;
    for (auto& e : events)
      if (handler_) handler_(p, e);
  }
  flushing_ = false;
}

void CmService::flush(CmPort& p) {
  drain(p);
  // The agent's deadline may have moved: let the thread re-arm its timer.
  uint64_t one = 1;
  ssize_t r = write(wakefd_, &one, sizeof one);
  (void)r;
}

void CmService::run() {
  epoll_event evs[16];
  for (;;) {
    int n = epoll_wait(epfd_, evs, 16, -1);
    if (n < 0 && errno != EINTR) {
      log().error("rdma_cm thread: epoll_wait: {}", std::strerror(errno));
      return;
    }
    uint64_t v;
    ssize_t r = read(timerfd_, &v, sizeof v);
    r = read(wakefd_, &v, sizeof v);
    (void)r;
    std::lock_guard<std::mutex> g(mu_);
    const Time t = now();
    fail_unreachable(t);
    for (auto& p : ports_) {
      auto deliver = [&](const wire::IpAddr& src, std::span<const uint8_t> mad) {
        p->agent->on_mad(src, mad, t);
      };
      p->gsi->poll(deliver);
      p->gsi->rearm();
      p->gsi->poll(deliver);  // what completed between the first poll and re-arming
      p->agent->on_timer(t);
      drain(*p);
    }
    arm_timer();
  }
}

}  // namespace uroce::cm
