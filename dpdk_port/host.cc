// uroce-dpdk-host: the process that owns a shared DPDK device (host_proto.h; docs/architecture.md
// "One device, many processes"). A client that finds no host for its device starts this one;
// it detaches (a new session, init's child), binds the device's abstract socket — a second host
// started at the same time finds it taken and leaves — opens the port, and then, on one thread:
// - steers each received datagram to the client owning its destination (Router::route: the slot
//   in its QPN or CM comm ID, or the listener of a REQ's service), a sendmmsg batch per client;
// - sends what its clients hand it, in the order each sent it;
// - answers the clients' control requests (join, the CM's claims);
// - frees a client's slot and claims as soon as its socket closes (exit, crash, kill -9);
// - answers ARP, neighbour discovery and ICMP echo (the DPDK port does, in its poll);
// - publishes the link and the NIC's counters in the page its clients map;
// and exits a few seconds (--linger-ms) after its last client left.
//
// Like the engine over a poll-mode port, it polls while traffic flows, then sleeps on the port's
// receive interrupts where the PMD has them (memif), else on a timer backing off to 1 ms.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dpdk_port/dpdk.h"
#include "dpdk_port/host_proto.h"
#include "dpdk_port/host_router.h"
#include "util/log.h"

namespace uroce::dpdk::host {
namespace {

template <typename T>
std::atomic_ref<T> at(T& v) {
  return std::atomic_ref<T>(v);
}

transport::Time now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<transport::Time>(ts.tv_sec) * 1'000'000'000 +
         static_cast<transport::Time>(ts.tv_nsec);
}

// Poll this long after the last frame either way before backing off, as the engine does over a
// poll-mode port. Longer spins (0.5, 2 ms) were slower on a 2-core host shared with other work:
// two spinning hosts beside two spinning applications (ib_send_lat) left the clients' threads
// waiting for a core (docs/performance.md).
constexpr transport::Time kSpinNs = 50'000;  // UROCE_DPDK_HOST_SPIN_US overrides it
constexpr transport::Time kMinBackoffNs = 20'000;
constexpr transport::Time kMaxBackoffNs = 1'000'000;
// The longest sleep on a PMD without receive interrupts (memif, af_packet) while clients are
// connected: each frame from the wire waits for the host's next look, twice per round trip, and
// the engine's 1 ms made a 64-byte round trip over memif 0.5-4 ms (docs/performance.md).
constexpr transport::Time kMaxClientBackoffNs = 100'000;
constexpr uint16_t kBurst = 32;

// epoll tags: kind in the top byte, the slot below.
enum : uint64_t { kListen = 1, kCtl = 2, kData = 3, kPortFd = 4 };
uint64_t tag(uint64_t kind, uint32_t slot = 0) {
  return kind << 56 | slot;
}

struct Client {
  int ctl = -1, data = -1;
  pid_t pid = 0;
  bool joined = false;
  uint64_t rx = 0, rx_dropped = 0, tx = 0, tx_dropped = 0;
};

class Host {
 public:
  Host(int listen_fd, std::string name, transport::Time linger)
      : listen_(listen_fd), name_(std::move(name)), linger_(linger) {}
  int run(const DpdkPortOptions& opt);

 private:
  bool open_port(const DpdkPortOptions& opt, std::string* err);
  void accept_clients();
  void on_ctl(int fd);
  void drop(int fd);
  void join(int fd, const Request& rq);
  size_t client_tx(uint32_t slot);
  size_t port_rx();
  // A datagram a client sent to the device's own address: to the client owning its destination,
  // as the port would have received it, without leaving the host (two processes of one device
  // talking to each other).
  void deliver_local(const TxHeader& h, const uint8_t* data, size_t len);
  // The RxHeader of a client's datagram to `dst` that the host hands to clients of its own device
  // (deliver_local, fan_out to a group's members here) instead of the port: from the device's
  // address to UDP 4791. One place, so the two loopback paths cannot drift apart; roce_v1 is left
  // to the caller (deliver_local copies the client's, the multicast copy has always left it 0).
  RxHeader loopback_header(const TxHeader& h, const wire::IpAddr& dst) const;
  // A datagram to an IPv4 multicast group: to every client that joined it.
  void fan_out(uint32_t group, const RxHeader& h, const uint8_t* data, size_t len);
  static bool multicast(const wire::IpAddr& ip) { return ip.is_v4() && (ip.v4() >> 28) == 0xe; }
  void publish();
  void add(int fd, uint64_t t) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = t;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
  }

  int listen_;
  std::string name_;
  transport::Time linger_;
  transport::Time spin_ns_ = kSpinNs;  // UROCE_DPDK_HOST_SPIN_US
  int ep_ = -1;
  DpdkPortOptions opt_;
  PortCounters counters_;
  std::unique_ptr<Port> port_;
  Router router_;
  std::map<uint32_t, std::set<uint32_t>> groups_;  // multicast group → the slots that joined
  std::map<int, Client> by_ctl_;                   // every connection, joined or not
  std::array<int, share::kSlots> slot_ctl_{};      // a joined slot's control fd
  int shm_fd_ = -1;
  Shared* shared_ = nullptr;
  transport::Time last_left_ = 0;
  transport::Time next_publish_ = 0;
  uint64_t unrouted_ = 0;
  std::vector<uint8_t> tx_buf_ = std::vector<uint8_t>(kBurst * kMaxMessage);
};

bool Host::open_port(const DpdkPortOptions& opt, std::string* err) {
  // A host that just left may still hold the device (its port closing): try for a while.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    port_ = dpdk::open_port(opt, counters_, err);
    if (port_ || std::chrono::steady_clock::now() > until) return port_ != nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void Host::publish() {
  at(shared_->link_up).store(port_->link_up() ? 1 : 0);
  NicInfo nic;
  if (port_->nic_info(&nic)) {
    const uint64_t* s = reinterpret_cast<const uint64_t*>(&nic);
    uint64_t* d = reinterpret_cast<uint64_t*>(&shared_->nic);
    for (size_t i = 0; i < sizeof(NicInfo) / 8; ++i)
      at(d[i]).store(s[i], std::memory_order_relaxed);
  }
}

void Host::accept_clients() {
  for (;;) {
    const int fd = accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    by_ctl_[fd] = Client{fd};
    add(fd, tag(kCtl, static_cast<uint32_t>(fd)));
  }
}

void Host::drop(int fd) {
  auto it = by_ctl_.find(fd);
  if (it == by_ctl_.end()) return;
  Client& c = it->second;
  epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
  if (c.data >= 0) {
    epoll_ctl(ep_, EPOLL_CTL_DEL, c.data, nullptr);
    close(c.data);
  }
  close(fd);
  if (c.joined) {
    for (uint32_t s = 0; s < share::kSlots; ++s)
      if (slot_ctl_[s] == fd) {
        router_.leave(s);
        slot_ctl_[s] = -1;
        for (auto g = groups_.begin(); g != groups_.end();) {
          g->second.erase(s);
          if (g->second.empty()) {
            port_->leave_group(g->first);
            g = groups_.erase(g);
          } else {
            ++g;
          }
        }
        log().info(
            "process {} (slot {}) left: {} frames to it ({} dropped: its socket full), {} from it "
            "({} dropped: the port's ring full)",
            c.pid, s, c.rx, c.rx_dropped, c.tx, c.tx_dropped);
      }
    last_left_ = now_ns();
  }
  by_ctl_.erase(it);
}

void Host::join(int fd, const Request& rq) {
  Client& c = by_ctl_[fd];
  JoinReply rep;
  auto fail = [&](int rc, const std::string& why) {
    rep.rc = rc;
    std::snprintf(rep.err, sizeof rep.err, "%s", why.c_str());
    send(fd, &rep, sizeof rep, MSG_NOSIGNAL);
  };
  if (c.joined) return fail(EINVAL, "joined twice");
  if (rq.ip != opt_.ip)
    return fail(EINVAL, fmt::format("the device is hosted with ip {}, this process has {}",
                                    opt_.ip.to_string(), rq.ip.to_string()));
  const int slot = router_.join();
  if (slot < 0)
    return fail(EBUSY, fmt::format("{} processes use the device already", share::kSlots));
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    router_.leave(static_cast<uint32_t>(slot));
    return fail(errno, std::string("socketpair: ") + std::strerror(errno));
  }
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  const int bytes = 8 << 20;
  if (setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  uint32_t& cursor = shared_->qpn_cursor[slot];
  if (at(cursor).load() == 0) at(cursor).store(0x11);  // as a device alone numbers its QPs
  rep.slot = static_cast<uint32_t>(slot);
  rep.ip_mtu = port_->caps().ip_mtu;
  rep.exact_icrc = port_->caps().exact_icrc;
  rep.roce_v1 = port_->caps().roce_v1;
  iovec iov{&rep, sizeof rep};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof cbuf;
  cmsghdr* cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {sv[1], shm_fd_};
  std::memcpy(CMSG_DATA(cm), fds, sizeof fds);
  const bool ok = sendmsg(fd, &m, MSG_NOSIGNAL) == sizeof rep;
  close(sv[1]);
  if (!ok) {
    close(sv[0]);
    router_.leave(static_cast<uint32_t>(slot));
    return;
  }
  c.joined = true;
  c.pid = rq.pid;
  c.data = sv[0];
  slot_ctl_[slot] = fd;
  add(sv[0], tag(kData, static_cast<uint32_t>(slot)));
  log().info("process {} joined: slot {}", rq.pid, slot);
}

void Host::on_ctl(int fd) {
  for (;;) {
    Request rq;
    const ssize_t n = recv(fd, &rq, sizeof rq, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n != sizeof rq || rq.magic != kMagic || rq.version != kVersion) return drop(fd);
    if (rq.op == Op::kJoin) {
      join(fd, rq);
      continue;
    }
    Client& c = by_ctl_[fd];
    uint32_t slot = share::kSlots;
    for (uint32_t s = 0; s < share::kSlots; ++s)
      if (slot_ctl_[s] == fd) slot = s;
    Reply rep;
    if (!c.joined || slot == share::kSlots) {
      rep.rc = EINVAL;
    } else if (rq.op == Op::kClaim) {
      rep.rc = router_.claim(slot, rq.port_space, rq.port);
    } else if (rq.op == Op::kRelease) {
      router_.release(slot, rq.port_space, rq.port);
    } else if (rq.op == Op::kListen) {
      router_.listen(slot, rq.port_space, rq.port, rq.on != 0);
    } else if (rq.op == Op::kJoinGroup) {
      std::set<uint32_t>& m = groups_[rq.group];
      if (m.empty()) rep.rc = port_->join_group(rq.group);  // the port joins once for all
      if (rep.rc == 0)
        m.insert(slot);
      else if (m.empty())
        groups_.erase(rq.group);
    } else if (rq.op == Op::kLeaveGroup) {
      auto g = groups_.find(rq.group);
      if (g != groups_.end() && g->second.erase(slot) && g->second.empty()) {
        port_->leave_group(rq.group);
        groups_.erase(g);
      }
    } else {
      rep.rc = EINVAL;
    }
    send(fd, &rep, sizeof rep, MSG_NOSIGNAL);
  }
}

size_t Host::client_tx(uint32_t slot) {
  Client& c = by_ctl_[slot_ctl_[slot]];
  mmsghdr msgs[kBurst];
  iovec iov[kBurst];
  for (uint16_t i = 0; i < kBurst; ++i) {
    iov[i] = {tx_buf_.data() + i * kMaxMessage, kMaxMessage};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  // As many frames as the port has buffers for: what it cannot take stays in the client's socket
  // (backpressure: the client waits, then drops, as at a full NIC ring), not dropped here.
  transport::TxBuf* spare[kBurst];
  unsigned m = 0;
  while (m < kBurst && (spare[m] = port_->tx_alloc()) != nullptr) ++m;
  unsigned used = 0;
  const int n = m ? recvmmsg(c.data, msgs, m, MSG_DONTWAIT, nullptr) : -1;
  auto give_back = [&] {
    for (unsigned i = used; i < m; ++i) port_->tx_free(spare[i]);
  };
  if (n < 0) {
    give_back();
    return 0;
  }
  transport::TxBuf* out[kBurst];
  uint16_t ids[kBurst];
  size_t k = 0;
  bool eof = n == 0;
  for (int i = 0; i < n; ++i) {
    const size_t len = msgs[i].msg_len;
    if (len == 0) {
      eof = true;
      break;
    }
    const uint8_t* p = tx_buf_.data() + i * kMaxMessage;
    if (len < sizeof(TxHeader) + 4 + 12 || len - sizeof(TxHeader) - 4 > transport::kMaxIbPacket) {
      ++c.tx_dropped;
      continue;
    }
    TxHeader h;
    std::memcpy(&h, p, sizeof h);
    if (h.dst_ip == opt_.ip) {
      deliver_local(h, p + sizeof h, len - sizeof h);
      ++c.tx;
      continue;
    }
    if (multicast(h.dst_ip) && groups_.count(h.dst_ip.v4())) {
      // The group's members on this device get it too, as the kernel loops a multicast
      // datagram back to its host's sockets; it also leaves on the wire for the others.
      fan_out(h.dst_ip.v4(), loopback_header(h, h.dst_ip), p + sizeof h, len - sizeof h);
    }
    transport::TxBuf* b = spare[used++];
    const size_t ib = len - sizeof h;  // IB packet and ICRC
    std::memcpy(b->data, p + sizeof h, ib);
    b->len = static_cast<uint32_t>(ib - 4);
    b->ext = nullptr;
    b->ext_len = 0;
    b->dst_ip = h.dst_ip;
    b->src_port = h.src_port;
    b->ecn = h.ecn;
    b->dscp = h.dscp;
    b->pcp = h.pcp;
    b->roce_v1 = h.roce_v1;
    ids[k] = h.ip_id;
    out[k++] = b;
  }
  if (k) {
    // The port numbers IP IDs as it likes (tx_prepare); the ICRC the client computed covers the
    // one it chose, which the frame must carry.
    port_->tx_prepare({out, k}, false);
    for (size_t i = 0; i < k; ++i) out[i]->ip_id = ids[i];
    const size_t sent = port_->tx_burst({out, k});
    c.tx += sent;
    c.tx_dropped += k - sent;
  }
  give_back();
  if (eof) drop(slot_ctl_[slot]);
  return static_cast<size_t>(n);
}

void Host::deliver_local(const TxHeader& h, const uint8_t* data, size_t len) {
  const int slot = router_.route(data, len);
  if (slot < 0) {
    ++unrouted_;
    return;
  }
  RxHeader r = loopback_header(h, opt_.ip);
  r.roce_v1 = h.roce_v1;
  iovec iov[2] = {{&r, sizeof r}, {const_cast<uint8_t*>(data), len}};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = 2;
  Client& c = by_ctl_[slot_ctl_[slot]];
  if (sendmsg(c.data, &m, MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
    ++c.rx;
  else
    ++c.rx_dropped;
}

RxHeader Host::loopback_header(const TxHeader& h, const wire::IpAddr& dst) const {
  RxHeader r;
  r.src_ip = opt_.ip;
  r.dst_ip = dst;
  r.src_port = h.src_port;
  r.dst_port = 4791;
  r.ip_id = h.ip_id;
  r.tos = static_cast<uint8_t>(h.dscp << 2 | (h.ecn & 3));
  r.ip_id_known = dst.is_v4();  // IPv6 has no ID
  r.dont_fragment = 1;
  return r;
}

void Host::fan_out(uint32_t group, const RxHeader& h, const uint8_t* data, size_t len) {
  auto g = groups_.find(group);
  if (g == groups_.end()) return;
  iovec iov[2] = {{const_cast<RxHeader*>(&h), sizeof h}, {const_cast<uint8_t*>(data), len}};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = 2;
  for (uint32_t slot : g->second) {
    Client& c = by_ctl_[slot_ctl_[slot]];
    if (sendmsg(c.data, &m, MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
      ++c.rx;
    else
      ++c.rx_dropped;
  }
}

size_t Host::port_rx() {
  const std::span<const RxFrame> frames = port_->rx_burst();
  if (frames.empty()) return 0;
  // Per destination slot, in arrival order: one sendmmsg each.
  RxHeader hdr[kBurst];
  iovec iov[kBurst][2];
  int dest[kBurst];
  const size_t n = std::min<size_t>(frames.size(), kBurst);
  for (size_t i = 0; i < n; ++i) {
    const RxFrame& f = frames[i];
    const bool group = multicast(f.dst_ip);
    dest[i] = group ? -1 : router_.route(f.data, f.len);
    if (dest[i] < 0 && !group) {
      ++unrouted_;
      continue;
    }
    RxHeader& h = hdr[i];
    h = {};
    h.src_ip = f.src_ip;
    h.dst_ip = f.dst_ip;
    h.src_port = f.src_port;
    h.dst_port = f.dst_port;
    h.ip_id = f.ip_id;
    h.tos = f.tos;
    h.ip_id_known = f.ip_id_known;
    h.dont_fragment = f.dont_fragment;
    h.roce_v1 = f.roce_v1;
    h.truncated = f.truncated;
    iov[i][0] = {&h, sizeof h};
    iov[i][1] = {const_cast<uint8_t*>(f.data), f.len};
    if (group) fan_out(f.dst_ip.v4(), h, f.data, f.len);
  }
  std::array<bool, kBurst> done{};
  for (size_t i = 0; i < n; ++i) {
    if (dest[i] < 0 || done[i]) continue;
    mmsghdr batch[kBurst];
    size_t k = 0;
    for (size_t j = i; j < n; ++j)
      if (dest[j] == dest[i]) {
        done[j] = true;
        batch[k] = {};
        batch[k].msg_hdr.msg_iov = iov[j];
        batch[k].msg_hdr.msg_iovlen = 2;
        ++k;
      }
    Client& c = by_ctl_[slot_ctl_[dest[i]]];
    size_t sent = 0;
    while (sent < k) {
      const int r = sendmmsg(c.data, batch + sent, static_cast<unsigned>(k - sent),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r > 0) {
        sent += static_cast<size_t>(r);
      } else if (r < 0 && errno == EINTR) {
        continue;
      } else {
        break;  // its socket is full (the client is behind) or gone: dropped, as a NIC would
      }
    }
    c.rx += sent;
    c.rx_dropped += k - sent;
  }
  return frames.size();
}

int Host::run(const DpdkPortOptions& opt) {
  opt_ = opt;
  slot_ctl_.fill(-1);
  if (const char* e = getenv("UROCE_DPDK_HOST_SPIN_US"))
    spin_ns_ = static_cast<transport::Time>(std::strtoull(e, nullptr, 10)) * 1000;
  shm_fd_ = memfd_create("uroce-dpdk-host", MFD_CLOEXEC);
  if (shm_fd_ < 0 || ftruncate(shm_fd_, sizeof(Shared)) != 0) return 1;
  void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd_, 0);
  if (m == MAP_FAILED) return 1;
  shared_ = static_cast<Shared*>(m);
  shared_->magic = kMagic;
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  std::string err;
  if (!open_port(opt, &err)) {
    log().error("cannot open the device: {}", err);
    // Whoever waits for the device hears why.
    const auto until = now_ns() + 500'000'000;
    while (now_ns() < until) {
      const int fd = accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      Request rq;
      timeval tv{1, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      if (recv(fd, &rq, sizeof rq, 0) == sizeof rq) {
        JoinReply rep;
        rep.rc = ENODEV;
        std::snprintf(rep.err, sizeof rep.err, "%s", err.c_str());
        send(fd, &rep, sizeof rep, MSG_NOSIGNAL);
      }
      close(fd);
    }
    return 1;
  }
  log().info("hosting {} on {}", port_->describe(), name_);
  fcntl(listen_, F_SETFL, fcntl(listen_, F_GETFL) | O_NONBLOCK);
  add(listen_, tag(kListen));
  for (int fd : port_->wait_fds()) add(fd, tag(kPortFd));
  const bool poll_mode = port_->caps().poll_mode;
  publish();
  last_left_ = now_ns();
  transport::Time last_active = now_ns(), backoff = kMinBackoffNs;
  bool armed = false, again = true;
  epoll_event evs[64];
  for (;;) {
    transport::Time t = now_ns();
    timespec ts{0, 0};
    const timespec* tsp = &ts;
    if (!again) {
      transport::Time sleep = transport::kNever;
      if (poll_mode && t - last_active < spin_ns_) {
        sleep = 0;
      } else if (poll_mode && !armed && port_->arm_wait()) {
        armed = true;  // one more pass: what came before arming raised no interrupt
        sleep = 0;
      } else if (poll_mode && !armed) {
        sleep = backoff;
        backoff = std::min(backoff * 2, by_ctl_.empty() ? kMaxBackoffNs : kMaxClientBackoffNs);
      }
      const transport::Time due = std::min(port_->next_deadline(), next_publish_);
      if (due != transport::kNever) sleep = std::min(sleep, due > t ? due - t : 0);
      if (by_ctl_.empty()) sleep = std::min<transport::Time>(sleep, 100'000'000);
      if (sleep == transport::kNever) {
        tsp = nullptr;
      } else {
        ts.tv_sec = static_cast<time_t>(sleep / 1'000'000'000);
        ts.tv_nsec = static_cast<long>(sleep % 1'000'000'000);
      }
    }
    const int n = epoll_pwait2(ep_, evs, 64, tsp, nullptr);
    if (armed && (n > 0 || tsp == nullptr || ts.tv_sec || ts.tv_nsec)) {
      port_->disarm_wait();
      armed = false;
    }
    size_t work = 0;
    for (int i = 0; i < n; ++i) {
      const uint64_t kind = evs[i].data.u64 >> 56;
      const uint32_t v = static_cast<uint32_t>(evs[i].data.u64);
      if (kind == kListen) {
        accept_clients();
      } else if (kind == kCtl) {
        if (evs[i].events & (EPOLLHUP | EPOLLERR) && !(evs[i].events & EPOLLIN))
          drop(static_cast<int>(v));
        else
          on_ctl(static_cast<int>(v));
      } else if (kind == kData) {
        if (router_.live(v) && slot_ctl_[v] >= 0) work += client_tx(v);
      }
    }
    work += port_rx();
    t = now_ns();
    if (port_->wants_poll() || t >= port_->next_deadline()) port_->poll(t);
    if (t >= next_publish_) {
      publish();
      next_publish_ = t + 100'000'000;
    }
    again = work > 0;
    if (work) {
      last_active = t;
      backoff = kMinBackoffNs;
    }
    if (router_.members() == 0 && by_ctl_.empty() && t - last_left_ > linger_) break;
  }
  // New clients from now on start another host (they retry until it has the device).
  close(listen_);
  log().info("no client for {} ms: closing the device ({} frames for nobody's QP dropped)",
             linger_ / 1'000'000, unrouted_);
  port_.reset();
  return 0;
}

int bind_socket(const std::string& name) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), std::min(name.size(), sizeof a.sun_path - 2));
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd, 128) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

}  // namespace
}  // namespace uroce::dpdk::host

int main(int argc, char** argv) {
  using namespace uroce;
  std::string name, body, log_path;
  long linger_ms = 2000;
  bool foreground = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--socket")
      name = next();
    else if (a == "--device")
      body = next();
    else if (a == "--log")
      log_path = next();
    else if (a == "--linger-ms")
      linger_ms = std::strtol(next().c_str(), nullptr, 10);
    else if (a == "--foreground")
      foreground = true;
    else {
      std::fprintf(stderr,
                   "usage: uroce-dpdk-host --device 'dev=…;ip=…' [--socket NAME] [--log FILE] "
                   "[--linger-ms N] [--foreground]\n(started by uroce for a dpdk(…;share=1) "
                   "device: docs/architecture.md)\n");
      return 2;
    }
  }
  dpdk::DpdkPortOptions opt;
  std::string err;
  if (!dpdk::parse_options(body, &opt, &err)) {
    std::fprintf(stderr, "uroce-dpdk-host: %s\n", err.c_str());
    return 2;
  }
  if (name.empty()) name = dpdk::host::socket_name(opt);
  if (!foreground) {
    // Detach: our parent (the application that started us) reaps this first process at once.
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid > 0) _exit(0);
    setsid();
  }
  if (!log_path.empty()) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
  }
  // Its log says who came and went, with each client's frames and drops.
  setenv("UROCE_LOG", "info", 0);
  // Its backoff sleeps are tens of microseconds: the kernel's default 50 µs timer slack would
  // add more than that to each (a 64-byte round trip over memif never went below 83 µs with it).
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  // The name first: a second host started meanwhile finds it taken and leaves the device to us.
  const int fd = dpdk::host::bind_socket(name);
  if (fd < 0) {
    log().info("uroce-dpdk-host: {} is hosted already ({})", name, std::strerror(errno));
    return 0;
  }
  dpdk::host::Host h(fd, name, static_cast<transport::Time>(linger_ms) * 1'000'000);
  return h.run(opt);
}
