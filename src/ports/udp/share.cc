// A device shared by many processes (share.h; docs/architecture.md, "One device, many
// processes"): the registry in shared memory under its flock — joining (a slot, its QPN cursor,
// the socket into the group), leaving and reaping dead members, the service claims rdma_cm's
// listeners make — and the watcher thread that notices a member's death. The probe rounds and
// the steering program are share_rounds.cc, the relay between members share_relay.cc, the
// registry's layout share_registry.h.
#include "ports/udp/share.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "ports/udp/share_registry.h"
#include "util/log.h"
#include "util/signals.h"

namespace uroce {

using share_detail::at;
using share_detail::format_ip;
using share_detail::gone;
using share_detail::kFree;
using share_detail::kLeaving;
using share_detail::kLive;
using share_detail::load;
using share_detail::read_share_addr;
using share_detail::ShareAddr;

namespace {

constexpr char kMagic[8] = {'u', 'r', 'o', 'c', 'e', 'S', 'G', '1'};
constexpr uint32_t kVersion = 2;  // 2: Slot::relay_port
// The first QPN a slot hands out: 0x11, as a device alone always did (slot 0 then numbers its
// QPs exactly as before; 0 and 1 are the special QPs).
constexpr uint32_t kFirstQpn = 0x11;

// A process's start time (field 22 of /proc/<pid>/stat), against pid reuse; 0 when there is no
// such process. *zombie: its thread group leader has exited.
uint64_t start_time(pid_t pid, bool* zombie = nullptr) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  std::ifstream f(path);
  std::string line;
  if (!std::getline(f, line)) return 0;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(line.substr(paren + 1));
  std::string tok;
  uint64_t start = 0;
  for (int field = 3; rest >> tok; ++field) {
    if (field == 3 && zombie) *zombie = tok == "Z" || tok == "X" || tok == "x";
    if (field == 22) {
      start = std::strtoull(tok.c_str(), nullptr, 10);
      break;
    }
  }
  return start;
}

// Whether the member process (pid, started at `started`) is gone with all its threads, and with
// them its sockets. /proc/<pid>/stat shows the thread group leader, a zombie as soon as that one
// thread has exited; after a SIGKILL the other threads may still be exiting then, the socket
// still in the group (the last thread's exit closes it). A pidfd is readable only when the whole
// group has exited (pidfd_open(2)): a member reaped on the leader alone would have its socket
// leave the group after the round that measured without it, unseen. Returns why (for the log,
// `detail` the numbers behind it), or nullptr while the member lives.
const char* gone_why(pid_t pid, uint64_t started, std::string* detail = nullptr) {
  const int pfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pfd < 0 && errno == ESRCH) return "no such process";
  bool zombie = false;
  const uint64_t now = start_time(pid, &zombie);
  const char* why = nullptr;
  if (now != started) {
    why = "another start time";  // pid reused (or /proc unreadable)
    if (detail) *detail = fmt::format("{} in /proc, {} when it joined", now, started);
  } else if (zombie && pfd < 0) {
    why = "its main thread exited";  // without pidfds: the leader's state alone
  }
  if (pfd >= 0) {
    if (now == started) {  // the pidfd is the member's (pid not reused before it was opened)
      pollfd p{pfd, POLLIN, 0};
      why = poll(&p, 1, 0) == 1 ? "its pidfd says it exited" : nullptr;
    }
    close(pfd);
  }
  return why;
}

// The relay socket: UDP on the device's address, a port of the kernel's choosing, nonblocking.
// Its buffer takes a burst of a stream's packets (the steering is stale for a round, a
// millisecond or two); the kernel caps it at net.core.rmem_max without privilege.
int relay_socket(const wire::IpAddr& ip, uint32_t scope_id) {
  const ShareAddr a(ip, 0, scope_id);
  const int fd = socket(a.ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  const int bytes = 4 << 20;
  int on = 1;
  if (a.ss.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  if (bind(fd, a.get(), a.len) != 0) {
    log().warn(
        "{}: cannot bind a relay socket ({}): datagrams the steering sends astray are "
        "dropped",
        format_ip(ip), std::strerror(errno));
    close(fd);
    return -1;
  }
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  wire::IpAddr ip;
  uint16_t port = 0;
  return getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0 && read_share_addr(a, &ip, &port)
             ? port
             : 0;
}

}  // namespace

namespace share_detail {

std::string format_ip(const wire::IpAddr& ip) {
  return ip.to_string();
}

ShareAddr::ShareAddr(const wire::IpAddr& ip, uint16_t port, uint32_t scope_id) {
  if (ip.is_v4()) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(ip.v4());
    a->sin_port = htons(port);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    std::memcpy(a->sin6_addr.s6_addr, ip.data(), 16);
    a->sin6_port = htons(port);
    a->sin6_scope_id = scope_id;
    len = sizeof *a;
  }
}

bool read_share_addr(const sockaddr_storage& ss, wire::IpAddr* ip, uint16_t* port) {
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    *ip = wire::IpAddr(ntohl(a->sin_addr.s_addr));
    *port = ntohs(a->sin_port);
    return true;
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    *ip = wire::IpAddr::from_bytes(a->sin6_addr.s6_addr);
    *port = ntohs(a->sin6_port);
    return true;
  }
  return false;
}

bool gone(pid_t pid, uint64_t started) {
  return gone_why(pid, started) != nullptr;
}

}  // namespace share_detail

std::string UdpShare::registry_path(const wire::IpAddr& ip, uint16_t port) {
  // The socket group is the network namespace's, and /dev/shm is shared across namespaces
  // (`ip netns exec`): two namespaces each with a device on 10.0.0.1 are two groups, and one
  // registry would have each wait for probes the other's members can never get.
  struct stat ns {};
  const unsigned long long netns = stat("/proc/self/ns/net", &ns) == 0 ? ns.st_ino : 0;
  return fmt::format("/dev/shm/uroce-share.{}.{}.{}.{}", getuid(), netns, format_ip(ip), port);
}

std::vector<UdpShare::Member> UdpShare::members(const wire::IpAddr& ip, uint16_t port) {
  std::vector<Member> out;
  const int f = ::open(registry_path(ip, port).c_str(), O_RDWR | O_CLOEXEC);
  if (f < 0) return out;
  struct stat st;
  void* m = fstat(f, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(Registry)
                ? mmap(nullptr, sizeof(Registry), PROT_READ | PROT_WRITE, MAP_SHARED, f, 0)
                : MAP_FAILED;
  close(f);
  if (m == MAP_FAILED) return out;
  Registry& r = *static_cast<Registry*>(m);
  if (std::memcmp(r.magic, kMagic, sizeof kMagic) == 0 && r.version == kVersion &&
      r.bytes == sizeof(Registry))
    for (uint32_t s = 0; s < share::kSlots; ++s)
      if (const uint32_t state = at(r.slots[s].state).load(); state != kFree)
        out.push_back({s, r.slots[s].pid, state == kLeaving, at(r.slots[s].position).load()});
  munmap(m, sizeof(Registry));
  return out;
}

uint32_t* UdpShare::qpn_cursor() {
  return &reg_->slots[slot_].qpn_cursor;
}

bool UdpShare::lock(std::string* err, bool drain) {
  for (;;) {
    if (file_ < 0) {
      file_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (file_ < 0) {
        if (err) *err = "cannot open " + path_ + ": " + std::strerror(errno);
        return false;
      }
    }
    while (flock(file_, drain ? LOCK_EX | LOCK_NB : LOCK_EX) != 0) {
      if (drain && errno == EWOULDBLOCK) {
        // A leaver waiting for the lock (a round holds it): its socket is still in the group.
        pass_on_astray();
        pollfd p{fd_, POLLIN, 0};
        poll(&p, 1, 2);
        continue;
      }
      if (errno != EINTR) {
        if (err) *err = "flock " + path_ + ": " + std::strerror(errno);
        return false;
      }
    }
    // The last member removes the file as it leaves: one that waited for the lock on the removed
    // file opens the new one.
    struct stat held, named;
    if (fstat(file_, &held) == 0 && held.st_nlink > 0 && stat(path_.c_str(), &named) == 0 &&
        named.st_ino == held.st_ino) {
      if (static_cast<size_t>(held.st_size) < sizeof(Registry) &&
          ftruncate(file_, sizeof(Registry)) != 0) {
        if (err) *err = "cannot size " + path_ + ": " + std::strerror(errno);
        flock(file_, LOCK_UN);
        return false;
      }
      if (!reg_) {
        void* m = mmap(nullptr, sizeof(Registry), PROT_READ | PROT_WRITE, MAP_SHARED, file_, 0);
        if (m == MAP_FAILED) {
          if (err) *err = "cannot map " + path_ + ": " + std::strerror(errno);
          flock(file_, LOCK_UN);
          return false;
        }
        reg_ = static_cast<Registry*>(m);
      }
      if (std::memcmp(reg_->magic, kMagic, sizeof kMagic) != 0 || reg_->version != kVersion ||
          reg_->bytes != sizeof(Registry)) {
        // A new file (zeros), or one of another layout whose members are gone or incompatible.
        std::memset(static_cast<void*>(reg_), 0, sizeof(Registry));
        std::memcpy(reg_->magic, kMagic, sizeof kMagic);
        reg_->version = kVersion;
        reg_->bytes = sizeof(Registry);
      }
      return true;
    }
    if (reg_) munmap(reg_, sizeof(Registry));
    reg_ = nullptr;
    close(file_);
    file_ = -1;
  }
}

void UdpShare::unlock() {
  flock(file_, LOCK_UN);
}

bool UdpShare::reap_dead() {
  const pid_t self = getpid();
  std::vector<uint32_t> dead;
  for (uint32_t s = 0; s < share::kSlots; ++s) {
    Registry::Slot& sl = reg_->slots[s];
    const uint32_t st = at(sl.state).load();
    if (st == kFree || sl.pid == self) continue;
    std::string detail;
    const char* why = gone_why(sl.pid, sl.start_time, &detail);
    if (!why) continue;
    log().info("{}:{}: process {} (slot {}) is gone ({}{}{}); its QPNs and listeners are released",
               format_ip(ip_), port_, sl.pid, s, why, detail.empty() ? "" : ": ", detail);
    dead.push_back(s);
  }
  // One death moves one socket, which the caller's round will measure: the kernel filled the
  // dead one's position with the group's last socket. Known at once, it is the program the
  // caller attaches now — not only once every member has answered a round, which on a loaded
  // host took long enough for that socket's peers to exhaust their retries (shared.churn).
  // Several deaths at once closed in an order nobody knows: the round alone tells.
  if (dead.size() == 1)
    if (const int moved = moved_by_leaving(dead[0]); moved >= 0)
      at(reg_->slots[moved].position).store(at(reg_->slots[dead[0]].position).load());
  for (uint32_t s : dead) free_slot(s);
  return !dead.empty();
}

int UdpShare::moved_by_leaving(uint32_t gone) const {
  // Under the lock the group holds a socket for every slot not free (a leaver closes its own
  // under the lock; temporary sockets live only inside the holder's round).
  uint32_t sockets = 0;
  for (auto& sl : reg_->slots) sockets += at(sl.state).load() != kFree;
  const int32_t hole = at(reg_->slots[gone].position).load();
  if (hole < 0 || static_cast<uint32_t>(hole) + 1 >= sockets) return -1;
  for (uint32_t s = 0; s < share::kSlots; ++s)
    if (s != gone && at(reg_->slots[s].state).load() != kFree &&
        at(reg_->slots[s].position).load() == static_cast<int32_t>(sockets - 1))
      return static_cast<int>(s);
  return -1;
}

// With the lock: writes a claim so that owner_of, reading without the lock, sees each field whole
// (and `used` last).
static void set_claim(UdpShare::Registry::Claim& c, const UdpShare::Registry::Claim& v) {
  at(c.used).store(0);
  at(c.port_space).store(v.port_space);
  at(c.port).store(v.port);
  at(c.slot).store(v.slot);
  at(c.listening).store(v.listening);
  c.refs = v.refs;
  at(c.used).store(v.used);
}

void UdpShare::free_slot(uint32_t s) {
  Registry::Slot& sl = reg_->slots[s];
  at(sl.state).store(kFree);
  sl.freed_at = ++reg_->freed;
  at(sl.position).store(-1);
  at(sl.relay_port).store(0);
  for (auto& c : reg_->claims)
    if (c.used && c.slot == s) set_claim(c, Registry::Claim{});
}

std::unique_ptr<UdpShare> UdpShare::join(const wire::IpAddr& ip, uint32_t scope_id, uint16_t port,
                                         SocketFactory make_socket, std::string* err) {
  std::unique_ptr<UdpShare> s(new UdpShare());
  s->ip_ = ip;
  s->scope_id_ = scope_id;
  s->port_ = port;
  s->path_ = registry_path(ip, port);
  s->make_socket_ = std::move(make_socket);
  std::lock_guard<std::mutex> g(s->mu_);
  if (!s->lock(err)) return nullptr;
  Registry& r = *s->reg_;
  s->reap_dead();
  // The free slot freed longest ago (never-used slots first, lowest first), so that a slot, and
  // the QPNs it numbers on from, comes back as late as possible.
  int best = -1;
  for (uint32_t i = 0; i < share::kSlots; ++i)
    if (at(r.slots[i].state).load() == kFree &&
        (best < 0 || r.slots[i].freed_at < r.slots[best].freed_at))
      best = static_cast<int>(i);
  if (best < 0) {
    s->unlock();
    if (err)
      *err = "cannot bind UDP " + format_ip(ip) + ":" + std::to_string(port) + ": " +
             std::to_string(share::kSlots) + " processes use this device already";
    return nullptr;
  }
  s->slot_ = static_cast<uint32_t>(best);
  Registry::Slot& sl = r.slots[s->slot_];
  sl.pid = getpid();
  sl.start_time = start_time(sl.pid);
  at(sl.position).store(-1);
  at(sl.acked_round).store(0);
  if (at(sl.qpn_cursor).load() == 0) at(sl.qpn_cursor).store(kFirstQpn);
  // The relay socket first: a member that sees us live may pass datagrams on at once.
  s->relay_fd_ = relay_socket(ip, scope_id);
  at(sl.relay_port).store(s->relay_fd_ >= 0 ? local_port(s->relay_fd_) : 0);
  at(sl.state).store(kLive);
  s->fd_ = s->make_socket_();
  if (s->fd_ < 0) {
    const int e = errno;
    at(sl.state).store(kFree);
    at(sl.relay_port).store(0);
    s->unlock();
    if (err) *err = std::strerror(e);
    errno = e;
    return nullptr;
  }
  s->prober_ =
      socket(ip.is_v4() ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  s->wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  s->round(s->fd_, s->fd_);
  s->unlock();
  {
    AllSignalsBlocked blocked;  // the watcher takes no signal of the application's (signals.h)
    s->watcher_ = std::thread([p = s.get()] { p->watch(); });
  }
  remove_stale_registries(s->path_);
  return s;
}

size_t UdpShare::remove_stale_registries(const std::string& keep) {
  // The last member removes its registry as it leaves; a last member killed with SIGKILL cannot,
  // and its file stays until a process opens that address again. A joiner removes those of its
  // user's that no live process holds (in every namespace: /dev/shm is shared).
  const std::string dir = "/dev/shm/";
  const std::string prefix = fmt::format("uroce-share.{}.", getuid());
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  size_t removed = 0;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const std::string path = dir + name;
    if (name.compare(0, prefix.size(), prefix) != 0 || path == keep) continue;
    const int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (f < 0) continue;
    struct stat st;
    // Its lock held: a member is in it right now (not stale, or a round of its own will tell).
    if (flock(f, LOCK_EX | LOCK_NB) != 0 || fstat(f, &st) != 0 || st.st_uid != getuid() ||
        st.st_nlink == 0) {
      close(f);
      continue;
    }
    bool stale = false;
    if (static_cast<size_t>(st.st_size) == sizeof(Registry)) {
      void* m = mmap(nullptr, sizeof(Registry), PROT_READ, MAP_SHARED, f, 0);
      if (m != MAP_FAILED) {
        const Registry& r = *static_cast<const Registry*>(m);
        stale = std::memcmp(r.magic, kMagic, sizeof kMagic) == 0 && r.version == kVersion &&
                r.bytes == sizeof(Registry);
        for (uint32_t i = 0; stale && i < share::kSlots; ++i)
          if (load(r.slots[i].state) != kFree && !gone(r.slots[i].pid, r.slots[i].start_time))
            stale = false;
        munmap(m, sizeof(Registry));
      }
    } else if (st.st_size == 0) {
      stale = true;  // created, never written: its creator died first
    }
    // Another layout (another uroce version) is left alone: its members cannot be read here.
    if (stale && unlink(path.c_str()) == 0) {
      ++removed;
      log().debug("removed {}: no live process holds it", path);
    }
    close(f);
  }
  closedir(d);
  return removed;
}

UdpShare::~UdpShare() {
  // No round waits for us from now on: our engine has stopped reading the socket, so we answer
  // no probe. First, before the watcher is joined: it may be waiting for the lock of a round
  // that waits for our answer (its timeout, 5 s, was the only way out, and the churn test's
  // pairs lost their traffic for that long).
  if (reg_) at(reg_->slots[slot_].state).store(kLeaving);
  stop_watcher();
  if (!reg_) {
    if (fd_ >= 0) close(fd_);
    if (relay_fd_ >= 0) close(relay_fd_);
    return;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    std::string why;
    // Until it holds the lock and closes its socket, the kernel can still pick that socket for
    // other members' datagrams (by hash, while a program is stale): it passes them on.
    const bool locked = lock(&why, /*drain=*/true);
    pass_on_astray();
    // Closing moves the group's last socket into our position. Which one that is is known, and
    // the program that says so is attached at once, before the round that measures again (its
    // peers' traffic went by hash for as long as that round took; shared.churn).
    const int32_t hole = at(reg_->slots[slot_].position).load();
    const int moved = locked ? moved_by_leaving(slot_) : -1;
    free_slot(slot_);
    close(fd_);
    fd_ = -1;
    if (relay_fd_ >= 0) close(relay_fd_);
    relay_fd_ = -1;
    if (moved >= 0) at(reg_->slots[moved].position).store(hole);
    if (locked) {
      reap_dead();
      bool members = false;
      for (auto& o : reg_->slots) members |= at(o.state).load() != kFree;
      if (!members) {
        unlink(path_.c_str());
      } else {
        // A socket of the group to attach from: it joins at the end and leaves from there, which
        // moves nobody — unless a member died meanwhile: the kernel then filled the dead one's
        // position with this last socket, and closing it from there moves the socket that is
        // last then, after the round measured it. Measure again with a new one, at the end.
        for (bool again = true, first = true; again; first = false) {
          const int tmp = make_socket_();
          if (tmp < 0) break;
          if (first) attach(tmp);  // the moved socket's new position, known
          again = round(tmp, -1);
          close(tmp);
        }
      }
      unlock();
    }
  }
  munmap(reg_, sizeof(Registry));
  close(file_);
  if (prober_ >= 0) close(prober_);
  if (wake_ >= 0) close(wake_);
}

void UdpShare::stop_watcher() {
  if (!watcher_.joinable()) return;
  stopping_ = true;
  uint64_t one = 1;
  ssize_t w = write(wake_, &one, sizeof one);
  (void)w;
  watcher_.join();
}

int UdpShare::claim_service(uint16_t port_space, uint16_t port) {
  std::lock_guard<std::mutex> g(mu_);
  if (!lock(nullptr)) return ENOMEM;
  if (reap_dead()) round(fd_, -1);
  int rc = 0;
  Registry::Claim* mine = nullptr;
  Registry::Claim* free_entry = nullptr;
  for (auto& c : reg_->claims) {
    if (!c.used) {
      if (!free_entry) free_entry = &c;
      continue;
    }
    if (c.port_space != port_space || c.port != port) continue;
    if (c.slot != slot_) rc = EADDRINUSE;
    mine = &c;
    break;
  }
  if (rc == 0) {
    if (mine) {
      ++mine->refs;
    } else if (free_entry) {
      set_claim(*free_entry,
                Registry::Claim{port_space, port, 1, static_cast<uint8_t>(slot_), 0, 0, 1});
    } else {
      rc = ENOMEM;
    }
  }
  unlock();
  return rc;
}

void UdpShare::release_service(uint16_t port_space, uint16_t port) {
  std::lock_guard<std::mutex> g(mu_);
  if (!lock(nullptr)) return;
  for (auto& c : reg_->claims) {
    if (!c.used || c.slot != slot_ || c.port_space != port_space || c.port != port) continue;
    if (--c.refs == 0) {
      const bool listened = c.listening;
      set_claim(c, Registry::Claim{});
      if (listened) attach(fd_);
    }
    break;
  }
  unlock();
}

void UdpShare::set_listening(uint16_t port_space, uint16_t port, bool on) {
  std::lock_guard<std::mutex> g(mu_);
  if (!lock(nullptr)) return;
  for (auto& c : reg_->claims) {
    if (!c.used || c.slot != slot_ || c.port_space != port_space || c.port != port) continue;
    if (c.listening != on) {
      at(c.listening).store(on);
      attach(fd_);
    }
    break;
  }
  unlock();
}

void UdpShare::watch() {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_;
  epoll_ctl(ep, EPOLL_CTL_ADD, wake_, &ev);
  std::map<pid_t, int> watched;  // pid → pidfd
  bool warned = false;
  const pid_t self = getpid();
  while (!stopping_) {
    // Who to watch: every other live member (without the lock: a stale view only delays).
    std::map<pid_t, bool> live;
    for (auto& sl : reg_->slots)
      if (at(sl.state).load() == kLive && sl.pid != self) live[sl.pid] = true;
    for (auto it = watched.begin(); it != watched.end();) {
      if (!live.count(it->first)) {
        close(it->second);
        it = watched.erase(it);
      } else {
        ++it;
      }
    }
    bool died = false;
    for (auto& [pid, _] : live) {
      if (watched.count(pid)) continue;
      const int pfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
      if (pfd < 0) {
        // A member that joined and died before we looked (reaped already): no pidfd will tell.
        if (errno == ESRCH) died = true;
        if (errno != ESRCH && !warned) {
          log().warn(
              "{}:{}: pidfd_open: {}; a process that dies is noticed only when another "
              "joins",
              format_ip(ip_), port_, std::strerror(errno));
          warned = true;
        }
        continue;
      }
      epoll_event pe{};
      pe.events = EPOLLIN;
      pe.data.fd = pfd;
      epoll_ctl(ep, EPOLL_CTL_ADD, pfd, &pe);
      watched[pid] = pfd;
    }
    epoll_event evs[16];
    const int n = epoll_wait(ep, evs, 16, died ? 0 : -1);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == wake_) {
        uint64_t v;
        ssize_t r = read(wake_, &v, sizeof v);
        (void)r;
      } else {
        died = true;
      }
    }
    if (died && !stopping_) {
      std::lock_guard<std::mutex> g(mu_);
      if (lock(nullptr)) {
        if (reap_dead()) {
          attach(fd_);  // the moved socket's new position (reap_dead), before the round's
          round(fd_, -1);
        }
        unlock();
      }
    }
  }
  for (auto& [pid, pfd] : watched) close(pfd);
  close(ep);
}

}  // namespace uroce
