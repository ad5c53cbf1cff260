// The client side of a shared DPDK device (hosted_port.h, host_proto.h): finding or spawning the
// host, joining it, and the Port and PortShare over its sockets.
#include "dpdk_port/hosted_port.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "dpdk_port/host_proto.h"
#include "util/log.h"

extern char** environ;

namespace uroce::dpdk {
namespace host {

std::string socket_name(const DpdkPortOptions& opt) {
  struct stat ns {};
  const unsigned long long netns = stat("/proc/self/ns/net", &ns) == 0 ? ns.st_ino : 0;
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the device string
  for (unsigned char c : opt.dev) h = (h ^ c) * 1099511628211ull;
  return fmt::format("uroce-dpdk.{}.{}.{:016x}", getuid(), netns, h);
}

}  // namespace host

namespace {

using namespace std::chrono_literals;

template <typename T>
std::atomic_ref<T> at(T& v) {
  return std::atomic_ref<T>(v);
}

int connect_host(const std::string& name) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), std::min(name.size(), sizeof a.sun_path - 2));
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// Starts the host for `opt` (it detaches itself: the child we wait for exits at once).
bool spawn_host(const DpdkPortOptions& opt, const std::string& name, std::string* err) {
  const std::string exe = host_executable();
  const std::string prog = exe.empty() ? "uroce-dpdk-host" : exe;
  const std::string log_path = "/tmp/" + name + ".log";
  std::vector<std::string> args = {prog, "--socket", name, "--log", log_path, "--device", opt.body};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  // The application's blocked signals and handlers are not the host's.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setflags(&at,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
  pid_t pid = -1;
  const int rc = exe.empty() ? posix_spawnp(&pid, prog.c_str(), &fa, &at, argv.data(), environ)
                             : posix_spawn(&pid, prog.c_str(), &fa, &at, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) {
    if (err)
      *err = fmt::format("cannot start the device's host {} ({}; UROCE_DPDK_HOST names it)", prog,
                         std::strerror(rc));
    return false;
  }
  // The host forks and its first process exits at once: reap it, so that the application is
  // left no child (a host that outlives it is init's).
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  log().info("dpdk {}: started its host {} (log {})", opt.dev, prog, log_path);
  return true;
}

class HostedPort final : public Port, public PortShare {
 public:
  static constexpr uint16_t kRxBurst = 32;
  static constexpr size_t kTxBufs = 512;
  static constexpr uint32_t kGatherMin = 1024;

  HostedPort(const DpdkPortOptions& opt, PortCounters& counters) : opt_(opt), counters_(counters) {}
  ~HostedPort() override {
    if (shared_) munmap(shared_, sizeof(host::Shared));
    if (data_fd_ >= 0) close(data_fd_);
    if (ctl_fd_ >= 0) close(ctl_fd_);
  }

  bool join(std::string* err);

  // Port.
  const PortCaps& caps() const override { return caps_; }
  wire::IpAddr ip() const override { return opt_.ip; }
  std::string describe() const override {
    return fmt::format("dpdk {} via its host (slot {})", opt_.dev, slot_);
  }
  std::span<const RxFrame> rx_burst() override;
  transport::TxBuf* tx_alloc() override {
    if (free_.empty()) return nullptr;
    transport::TxBuf* b = free_.back();
    free_.pop_back();
    b->ext = nullptr;
    b->ext_len = 0;
    return b;
  }
  void tx_free(transport::TxBuf* buf) override { free_.push_back(buf); }
  size_t tx_burst(std::span<transport::TxBuf* const> bufs) override;
  std::span<const int> wait_fds() const override { return {&data_fd_, 1}; }
  transport::Time next_deadline() const override { return next_poll_; }
  bool poll(transport::Time now) override {
    next_poll_ = now + 1'000'000'000;
    const bool up = link_up();
    const bool changed = up != last_up_;
    last_up_ = up;
    return changed;
  }
  bool link_up() const override {
    return !host_gone_.load(std::memory_order_relaxed) && at(shared_->link_up).load() != 0;
  }
  bool nic_info(NicInfo* out) const override {
    NicInfo& src = shared_->nic;
    uint64_t* d = reinterpret_cast<uint64_t*>(out);
    uint64_t* s = reinterpret_cast<uint64_t*>(&src);
    for (size_t i = 0; i < sizeof(NicInfo) / 8; ++i)
      d[i] = at(s[i]).load(std::memory_order_relaxed);
    return true;
  }
  int join_group(uint32_t group) override {
    if ((group >> 28) != 0xe) return EINVAL;
    return call(host::Op::kJoinGroup, 0, 0, false, group);
  }
  void leave_group(uint32_t group) override { call(host::Op::kLeaveGroup, 0, 0, false, group); }
  PortShare* share() override { return this; }

  // PortShare.
  uint32_t qpn_base() const override { return slot_ << share::kQpnSlotShift; }
  uint32_t qpn_count() const override { return share::kQpnsPerSlot; }
  uint32_t* qpn_cursor() override { return &shared_->qpn_cursor[slot_]; }
  uint32_t comm_id_base() const override { return slot_ << share::kCommIdSlotShift; }
  uint32_t comm_id_count() const override { return 1u << share::kCommIdSlotShift; }
  int claim_service(uint16_t space, uint16_t port) override {
    return call(host::Op::kClaim, space, port, false);
  }
  void release_service(uint16_t space, uint16_t port) override {
    call(host::Op::kRelease, space, port, false);
  }
  void set_listening(uint16_t space, uint16_t port, bool on) override {
    call(host::Op::kListen, space, port, on);
  }

 private:
  // One request to the host and its answer (the CM's claims: rare, any thread).
  int call(host::Op op, uint16_t space, uint16_t port, bool on, uint32_t group = 0);
  // The host is gone (it never exits while it has clients: killed): the port's link goes down and
  // its socket stops waking the engine.
  void host_lost();

  DpdkPortOptions opt_;
  PortCounters& counters_;
  PortCaps caps_;
  int ctl_fd_ = -1, data_fd_ = -1;
  host::Shared* shared_ = nullptr;
  uint32_t slot_ = 0;
  std::mutex ctl_mu_;
  std::atomic<bool> host_gone_{false};
  transport::Time next_poll_ = 0;
  bool last_up_ = false;
  // Transmit buffers (device lock).
  std::vector<transport::TxBuf> pool_{kTxBufs};
  std::vector<transport::TxBuf*> free_;
  // Receive (the engine's receive lock).
  std::vector<uint8_t> rx_buf_ = std::vector<uint8_t>(kRxBurst * host::kMaxMessage);
  RxFrame rx_out_[kRxBurst];
};

bool HostedPort::join(std::string* err) {
  const std::string name = host::socket_name(opt_);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  auto spawned_at = std::chrono::steady_clock::time_point{};
  bool spawned = false;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) {
      if (err)
        *err =
            fmt::format("dpdk {}: its host did not answer (its log: /tmp/{}.log)", opt_.dev, name);
      return false;
    }
    ctl_fd_ = connect_host(name);
    if (ctl_fd_ < 0) {
      // Nobody hosts the device (or its host is on its way out): start one. Again after a while
      // when the one started lost a race with an exiting host or failed.
      if (!spawned || now - spawned_at > 3s) {
        if (!spawn_host(opt_, name, err)) return false;
        spawned = true;
        spawned_at = now;
      }
      std::this_thread::sleep_for(5ms);
      continue;
    }
    host::Request rq;
    rq.op = host::Op::kJoin;
    rq.pid = getpid();
    rq.ip = opt_.ip;
    // The host may be opening its port (the EAL's start takes about a second): wait for it.
    timeval tv{60, 0};
    setsockopt(ctl_fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (send(ctl_fd_, &rq, sizeof rq, MSG_NOSIGNAL) != sizeof rq) {
      close(ctl_fd_);
      ctl_fd_ = -1;
      continue;
    }
    host::JoinReply rep;
    iovec iov{&rep, sizeof rep};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(2 * sizeof(int))];
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    const ssize_t n = recvmsg(ctl_fd_, &m, MSG_CMSG_CLOEXEC);
    int fds[2] = {-1, -1};
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(2 * sizeof(int)))
        std::memcpy(fds, CMSG_DATA(c), sizeof fds);
    if (n != sizeof rep || rep.magic != host::kMagic) {
      // The host closed on us: it was exiting as we came. Another is needed.
      for (int f : fds)
        if (f >= 0) close(f);
      close(ctl_fd_);
      ctl_fd_ = -1;
      spawned = false;
      continue;
    }
    if (rep.rc != 0) {
      if (err) *err = fmt::format("dpdk {}: {}", opt_.dev, rep.err);
      for (int f : fds)
        if (f >= 0) close(f);
      return false;
    }
    if (fds[0] < 0 || fds[1] < 0) {
      if (err) *err = fmt::format("dpdk {}: its host sent no sockets", opt_.dev);
      return false;
    }
    data_fd_ = fds[0];
    void* p = mmap(nullptr, sizeof(host::Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
    close(fds[1]);
    if (p == MAP_FAILED) {
      if (err)
        *err =
            fmt::format("dpdk {}: cannot map its host's page: {}", opt_.dev, std::strerror(errno));
      return false;
    }
    shared_ = static_cast<host::Shared*>(p);
    timeval none{0, 0};
    setsockopt(ctl_fd_, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    fcntl(data_fd_, F_SETFL, fcntl(data_fd_, F_GETFL) | O_NONBLOCK);
    // Room for a window's worth of frames each way (without privilege: net.core.wmem_max).
    const int bytes = 8 << 20;
    if (setsockopt(data_fd_, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
      setsockopt(data_fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    slot_ = rep.slot;
    caps_.ip_mtu = rep.ip_mtu;
    caps_.exact_icrc = rep.exact_icrc;
    caps_.roce_v1 = rep.roce_v1;
    caps_.tx_gather_min = kGatherMin;
    caps_.multicast = opt_.ip.is_v4();  // the host joins the group on the port for its clients
    last_up_ = link_up();
    for (auto& b : pool_) free_.push_back(&b);
    return true;
  }
}

int HostedPort::call(host::Op op, uint16_t space, uint16_t port, bool on, uint32_t group) {
  std::lock_guard<std::mutex> g(ctl_mu_);
  host::Request rq;
  rq.op = op;
  rq.pid = getpid();
  rq.port_space = space;
  rq.port = port;
  rq.on = on;
  rq.group = group;
  host::Reply rep;
  if (send(ctl_fd_, &rq, sizeof rq, MSG_NOSIGNAL) != sizeof rq ||
      recv(ctl_fd_, &rep, sizeof rep, 0) != sizeof rep)
    return ENODEV;
  return rep.rc;
}

void HostedPort::host_lost() {
  if (host_gone_.exchange(true)) return;
  log().error("{}: its host closed the connection: the device is down", describe());
  // An eventfd in the socket's place: the engine's epoll forgets the closed socket (readable
  // for ever at its end) and the port's wait fd stays valid.
  const int quiet = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (quiet >= 0) {
    dup2(quiet, data_fd_);
    close(quiet);
  }
}

std::span<const RxFrame> HostedPort::rx_burst() {
  if (host_gone_.load(std::memory_order_relaxed)) return {};
  mmsghdr msgs[kRxBurst];
  iovec iov[kRxBurst];
  for (uint16_t i = 0; i < kRxBurst; ++i) {
    iov[i] = {rx_buf_.data() + i * host::kMaxMessage, host::kMaxMessage};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  const int n = recvmmsg(data_fd_, msgs, kRxBurst, MSG_DONTWAIT, nullptr);
  if (n <= 0) return {};
  uint16_t out = 0;
  for (int i = 0; i < n; ++i) {
    const size_t len = msgs[i].msg_len;
    const uint8_t* p = rx_buf_.data() + i * host::kMaxMessage;
    if (len == 0) {  // end of file: the host is gone
      host_lost();
      break;
    }
    if (len < sizeof(host::RxHeader)) {
      counters_.rx_port_errors.add();
      continue;
    }
    host::RxHeader h;
    std::memcpy(&h, p, sizeof h);
    RxFrame& f = rx_out_[out++];
    f.data = p + sizeof h;
    f.len = static_cast<uint32_t>(len - sizeof h);
    f.truncated = h.truncated || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC);
    f.src_ip = h.src_ip;
    f.dst_ip = h.dst_ip;
    f.src_port = h.src_port;
    f.dst_port = h.dst_port;
    f.tos = h.tos;
    f.ip_id_known = h.ip_id_known;
    f.dont_fragment = h.dont_fragment;
    f.ip_id = h.ip_id;
    f.roce_v1 = h.roce_v1;
  }
  return {rx_out_, out};
}

size_t HostedPort::tx_burst(std::span<transport::TxBuf* const> bufs) {
  constexpr size_t kBatch = 32;
  size_t sent = 0;
  for (size_t off = 0; off < bufs.size(); off += kBatch) {
    const size_t k = std::min(kBatch, bufs.size() - off);
    host::TxHeader hdr[kBatch];
    iovec iov[kBatch][4];
    mmsghdr msgs[kBatch];
    for (size_t i = 0; i < k; ++i) {
      transport::TxBuf* b = bufs[off + i];
      host::TxHeader& h = hdr[i];
      h = {};
      h.dst_ip = b->dst_ip;
      h.src_port = b->src_port;
      h.ip_id = b->ip_id;
      h.ecn = b->ecn;
      h.dscp = b->dscp == transport::kDscpPortDefault ? opt_.data_dscp : b->dscp;
      h.pcp = b->pcp;
      h.roce_v1 = b->roce_v1;
      size_t nv = 0;
      iov[i][nv++] = {&h, sizeof h};
      iov[i][nv++] = {b->data, b->len};
      if (b->ext_len) iov[i][nv++] = {const_cast<uint8_t*>(b->ext), b->ext_len};
      iov[i][nv++] = {b->data + b->len, 4};  // the ICRC
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = iov[i];
      msgs[i].msg_hdr.msg_iovlen = nv;
    }
    size_t done = 0;
    int waits = 0;
    while (done < k) {
      const int n = sendmmsg(data_fd_, msgs + done, static_cast<unsigned>(k - done),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        for (int i = 0; i < n; ++i) {
          counters_.sent_pkts.add();
          counters_.sent_bytes.add(bufs[off + done + i]->ib_len() + 4);
        }
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      // The host is behind: give it a moment (its ring drains at the link's rate), then drop
      // what still does not fit, as a full NIC ring would.
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && waits++ < 2) {
        pollfd p{data_fd_, POLLOUT, 0};
        ::poll(&p, 1, 1);
        continue;
      }
      break;
    }
    if (done < k) counters_.tx_errors.add(k - done);
    sent += done;
  }
  for (transport::TxBuf* b : bufs) free_.push_back(b);
  return sent;
}

}  // namespace

std::string host_executable() {
  if (const char* e = getenv("UROCE_DPDK_HOST"); e && *e) return e;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&host_executable), &info) && info.dli_fname) {
    char real[PATH_MAX];
    std::string self = info.dli_fname;
    if (realpath(info.dli_fname, real)) self = real;
    const std::string dir = self.substr(0, self.rfind('/'));
    for (const char* rel : {"/uroce-dpdk-host", "/../bin/uroce-dpdk-host",
                            "/../libexec/uroce-dpdk-host", "/../../bin/uroce-dpdk-host"}) {
      const std::string p = dir + rel;
      if (access(p.c_str(), X_OK) == 0) return p;
    }
  }
  return "";
}

std::unique_ptr<Port> open_hosted_port(const DpdkPortOptions& opt, PortCounters& counters,
                                       std::string* err) {
  auto p = std::make_unique<HostedPort>(opt, counters);
  if (!p->join(err)) return nullptr;
  return p;
}

}  // namespace uroce::dpdk
