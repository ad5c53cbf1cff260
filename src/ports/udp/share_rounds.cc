// A shared device's probe rounds (share.h): measuring where each member's socket sits in the
// SO_REUSEPORT group (a probe per position, resent until every live member answered or timed
// out), answering a probe, and attaching the steering program built from the positions
// (steering.h). Apart from the registry and the relay: the one place the group's order is learnt.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ports/udp/share.h"
#include "ports/udp/share_registry.h"
#include "ports/udp/steering.h"
#include "util/log.h"

namespace uroce {

using share_detail::at;
using share_detail::format_ip;
using share_detail::gone;
using share_detail::kFree;
using share_detail::kLive;
using share_detail::load;

namespace {

// How often a round resends the probes not yet answered (a member's full socket buffer drops
// them), and how long it waits for a member before leaving it out.
constexpr int kResendMs = 20;
std::atomic<int> g_round_timeout_ms{5000};
std::atomic<uint64_t> g_rounds_timed_out{0};

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

}  // namespace

void UdpShare::set_round_timeout_ms(int ms) {
  g_round_timeout_ms = ms;
}

uint64_t UdpShare::rounds_timed_out() {
  return g_rounds_timed_out.load();
}

void UdpShare::on_probe(const share::Probe& p) {
  Registry::Slot& sl = reg_->slots[slot_];
  // A probe of an earlier round can come after the current one's (a resent copy, delivered late
  // by a busy CPU's backlog): answering it would take back our answer to the current round, and
  // a round that saw us answer would then attach a program without our slot.
  const uint32_t acked = at(sl.acked_round).load(std::memory_order_relaxed);
  if (static_cast<int32_t>(p.round - acked) < 0) return;
  log().debug("{}:{}: slot {} answers round {}: position {}", format_ip(ip_), port_, slot_, p.round,
              p.position);
  at(sl.position).store(static_cast<int32_t>(p.position), std::memory_order_relaxed);
  at(sl.acked_round).store(p.round, std::memory_order_release);
  // A member joined, left or died: the watcher looks at who to watch.
  uint64_t one = 1;
  ssize_t w = write(wake_, &one, sizeof one);
  (void)w;
}

bool UdpShare::round(int attach_fd, int drain_fd) {
  Registry& r = *reg_;
  bool restarted = false;
  for (;;) {
    reap_dead();
    const uint32_t rnd = ++r.round;
    // The live members answer; a leaving one (waiting for our lock to close its socket) does not,
    // but its socket still holds a position, so the group has a socket for every slot not free
    // (besides `attach_fd` of a leaver's round, the last): every one of those positions is
    // probed. Probing only as many as answer would leave the member sitting past them without
    // its probe, and the round waiting for it until the timeout, while the old program sends
    // one slot to the socket a leaver's close moved away (its temporary socket's place now).
    std::vector<uint32_t> members;
    uint32_t sockets = 0;
    for (uint32_t s = 0; s < share::kSlots; ++s) {
      const uint32_t st = at(r.slots[s].state).load();
      if (st == kLive) members.push_back(s);
      if (st != kFree) ++sockets;
    }
    // Who can have moved since the last round measured them: only the kernel's last sockets move
    // (into a leaver's position), so a member that answered the last round with a position below
    // today's socket count, held by no other member, sits where it sat. Its answer is taken as
    // given, and the round waits only for the others: a joiner, the sockets that were last,
    // members left out before. Waiting for every member made each round as slow as the busiest
    // process of the group, and a socket the kernel moved lost its traffic meanwhile (a pair
    // beside a 1.3 GB/s stream exhausted its retries: shared_device.sh churn).
    {
      std::vector<int> holders(sockets, 0);
      auto pos_of = [&](uint32_t s) { return at(r.slots[s].position).load(); };
      for (uint32_t s : members)
        if (const int32_t p = pos_of(s); p >= 0 && static_cast<uint32_t>(p) < sockets) ++holders[p];
      for (uint32_t s : members) {
        const int32_t p = pos_of(s);
        if (p >= 0 && static_cast<uint32_t>(p) < sockets && holders[p] == 1 &&
            at(r.slots[s].acked_round).load() == rnd - 1)
          at(r.slots[s].acked_round).store(rnd, std::memory_order_release);
      }
    }
    const share_detail::ShareAddr to(ip_, port_, scope_id_);
    std::vector<bool> answered(sockets, false);
    auto send_probes = [&] {
      for (uint32_t pos = 0; pos < sockets; ++pos) {
        if (answered[pos]) continue;
        uint8_t buf[share::kProbeBytes];
        share::write_probe(buf, {pos, rnd});
        ssize_t n = sendto(prober_, buf, sizeof buf, 0, to.get(), to.len);
        (void)n;
      }
    };
    if (log().should_log(spdlog::level::debug)) {
      std::string who;
      for (uint32_t s : members)
        who += fmt::format(" {}:{}", s, r.slots[s].pid);  // not operator+: GCC 12's -Wrestrict
      log().debug("{}:{}: round {} by process {}: {} positions; live members (slot:pid){}",
                  format_ip(ip_), port_, rnd, getpid(), sockets, who);
    }
    send_probes();
    const uint64_t start = now_ms();
    uint64_t last_send = start;
    bool restart = false;
    for (;;) {
      // Our own socket, before the engine reads it: the probe for our position, and whatever
      // the stale program or the hash sent here meanwhile, passed on to its owner (a pair whose
      // socket the kernel moved lost everything a joiner's round took: shared_device.sh churn).
      if (drain_fd >= 0) pass_on(drain_fd, rnd);
      bool done = true;
      std::fill(answered.begin(), answered.end(), false);
      for (uint32_t s : members) {
        Registry::Slot& sl = r.slots[s];
        if (at(sl.state).load() != kLive) continue;  // leaving: it waits for our lock
        if (at(sl.acked_round).load(std::memory_order_acquire) == rnd) {
          const int32_t pos = at(sl.position).load(std::memory_order_relaxed);
          if (pos >= 0 && static_cast<size_t>(pos) < answered.size()) answered[pos] = true;
        } else {
          done = false;
        }
      }
      if (done) break;
      const uint64_t t = now_ms();
      if (t - last_send >= kResendMs) {
        // A member that died since the round began will never answer, and its socket's
        // departure moved another: start again without it.
        for (uint32_t s : members)
          if (at(r.slots[s].state).load() == kLive && r.slots[s].pid != getpid() &&
              gone(r.slots[s].pid, r.slots[s].start_time))
            restart = true;
        if (restart) {
          log().debug("{}:{}: round {}: a member died meanwhile; starting again", format_ip(ip_),
                      port_, rnd);
          break;
        }
        send_probes();
        last_send = t;
      }
      if (t - start >= static_cast<uint64_t>(g_round_timeout_ms.load())) {
        ++g_rounds_timed_out;
        log().warn(
            "{}:{}: a process sharing the device did not answer its probe in {} ms; its "
            "traffic goes by hash until the next round",
            format_ip(ip_), port_, g_round_timeout_ms.load());
        break;
      }
      if (drain_fd >= 0) {
        pollfd pf{drain_fd, POLLIN, 0};
        poll(&pf, 1, 1);
      } else {
        timespec ts{0, 200'000};
        nanosleep(&ts, nullptr);
      }
    }
    if (!restart) break;
    restarted = true;
  }
  attach(attach_fd);
  return restarted;
}

void UdpShare::attach(int attach_fd) {
  Registry& r = *reg_;
  share::SteeringTable t;
  for (uint32_t s = 0; s < share::kSlots; ++s)
    if (at(r.slots[s].state).load() == kLive &&
        at(r.slots[s].acked_round).load(std::memory_order_acquire) == r.round)
      t.position[s] = at(r.slots[s].position).load(std::memory_order_relaxed);
  for (const auto& c : r.claims)
    if (c.used && c.listening)
      t.listeners.push_back({uint32_t{c.port_space} << 16 | c.port, c.slot});
  if (log().should_log(spdlog::level::debug)) {
    std::string map;
    for (uint32_t s = 0; s < share::kSlots; ++s)
      if (t.position[s] >= 0) map += fmt::format(" slot {}→{}", s, t.position[s]);
    log().debug("{}:{}: round {}: process {} attaches the program:{}", format_ip(ip_), port_,
                r.round, getpid(), map.empty() ? " no member" : map);
  }
  std::vector<sock_filter> code = share::build_program(t);
  sock_fprog prog{static_cast<unsigned short>(code.size()), code.data()};
  if (setsockopt(attach_fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) != 0)
    log().error("{}:{}: cannot attach the steering program ({} instructions): {}", format_ip(ip_),
                port_, code.size(), std::strerror(errno));
}

}  // namespace uroce
