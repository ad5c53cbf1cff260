// The shared UDP port's group (src/ports/udp/share.h; docs/architecture.md, "One device, many
// processes"): the probe rounds that measure where each member's socket sits in the SO_REUSEPORT
// group, with stand-ins for the members' receive paths.
#include "ports/udp/share.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "test_util.h"

namespace uroce {
namespace {

using test::loopback;

int reuseport_socket(uint32_t ip) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int on = 1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = htons(wire::kRoceV2UdpPort);
  // Room for a burst, as UdpPort makes (a stream below outpaces a test's reader now and then).
  const int bytes = 4 << 20;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// A member: its share and a thread standing in for its receive path (UdpPort::rx_burst), which
// answers probes and counts the datagrams for its own slot and for other slots.
struct Member {
  std::unique_ptr<UdpShare> share;
  std::thread rx;
  std::atomic<bool> stop{false};
  std::atomic<int> mine{0}, others{0}, relayed{0}, passed_on{0};
  bool pass_on = false;  // another member's datagram goes on to it, as UdpPort does

  bool join(uint32_t ip) {
    std::string err;
    share = UdpShare::join(
        ip, wire::kRoceV2UdpPort, [ip] { return reuseport_socket(ip); }, &err);
    if (!share) return false;
    rx = std::thread([this] {
      uint8_t buf[2048];
      while (!stop) {
        pollfd p[2] = {{share->fd(), POLLIN, 0}, {share->relay_fd(), POLLIN, 0}};
        if (poll(p, 2, 5) <= 0) continue;
        if (p[1].revents & POLLIN) {
          // Passed on by another member (UdpShare::relay): the header, then the datagram.
          const ssize_t r = recv(share->relay_fd(), buf, sizeof buf, MSG_DONTWAIT);
          constexpr size_t kHdr = sizeof(UdpShare::RelayHeader);
          if (r >= static_cast<ssize_t>(kHdr + 8)) {
            const uint8_t* d = buf + kHdr;
            const uint32_t dest_qp = uint32_t{d[5]} << 16 | uint32_t{d[6]} << 8 | d[7];
            if ((dest_qp >> share::kQpnSlotShift) == share->slot()) ++relayed;
          }
        }
        const ssize_t n = recv(share->fd(), buf, sizeof buf, MSG_DONTWAIT);
        if (n < 8) continue;
        if (auto probe = share::parse_probe(buf, static_cast<size_t>(n))) {
          share->on_probe(*probe);
          continue;
        }
        const uint32_t dest_qp = uint32_t{buf[5]} << 16 | uint32_t{buf[6]} << 8 | buf[7];
        if (const int owner = share->owner_of(buf, static_cast<size_t>(n)); pass_on && owner >= 0) {
          const UdpShare::RelayHeader h{UdpShare::kRelayMagic, 0, 0, 0, {}};
          if (share->relay(static_cast<uint32_t>(owner), h, buf, static_cast<size_t>(n))) {
            ++passed_on;
            continue;
          }
        }
        ++((dest_qp >> share::kQpnSlotShift) == share->slot() ? mine : others);
      }
    });
    return true;
  }
  // Stops reading, as a process closing its device stops its engine first.
  void stop_reading() {
    stop = true;
    if (rx.joinable()) rx.join();
  }
  ~Member() { stop_reading(); }
};

bool all_leaving(uint32_t ip, const std::vector<uint32_t>& slots) {
  size_t n = 0;
  for (const auto& m : UdpShare::members(ip, wire::kRoceV2UdpPort))
    for (uint32_t s : slots) n += m.slot == s && m.leaving;
  return n == slots.size();
}

// Sends `each` datagrams to the slot of every member in `which` from `sender_ip` and expects each
// member to receive exactly its own (loopback loses nothing: the wait is a bound for a lost one).
void expect_steered(uint32_t ip, uint32_t sender_ip, const std::vector<std::unique_ptr<Member>>& m,
                    const std::vector<int>& which) {
  test::RawSender sender(sender_ip);
  ASSERT_TRUE(sender.ok());
  constexpr int kEach = 20;
  for (int k = 0; k < kEach; ++k)
    for (int i : which) {
      uint8_t pkt[64];
      const uint32_t qpn = m[i]->share->slot() << share::kQpnSlotShift | 0x11;
      const size_t n = test::build_packet(pkt, wire::Opcode::kRcSendOnly, qpn, 0, {});
      ASSERT_TRUE(sender.send_ib(ip, {pkt, n}));
    }
  auto got = [&] {
    int n = 0;
    for (int i : which) n += m[i]->mine + m[i]->others;
    return n;
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got() < kEach * static_cast<int>(which.size()) &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int i : which) {
    EXPECT_EQ(m[i]->mine, kEach) << "member " << i;
    EXPECT_EQ(m[i]->others, 0) << "member " << i;
  }
}

// Two members close their devices at once (the two processes of a pair that ends): the second
// waits for the registry's lock with its socket still in the group while the first closes its
// socket and measures. The round must probe the waiting member's position too: probing only as
// many positions as there are live members leaves the live member past them without a probe, the
// round waiting for it until the timeout, and meanwhile the old program sends the slot of the
// member the close moved to the leaver's temporary socket, which nobody reads.
TEST(UdpShareTest, ARoundProbesThePositionOfAMemberStillLeaving) {
  UdpShare::set_round_timeout_ms(2000);  // what a missed member costs: counted below
  const uint32_t ip = loopback(50, 1, 1);
  std::vector<std::unique_ptr<Member>> m;
  for (int i = 0; i < 4; ++i) {
    m.push_back(std::make_unique<Member>());
    ASSERT_TRUE(m.back()->join(ip));
  }
  const uint64_t timed_out = UdpShare::rounds_timed_out();
  // Hold the registry's lock so that both leavers wait for it, having said they leave.
  const int f = open(UdpShare::registry_path(ip, wire::kRoceV2UdpPort).c_str(), O_RDWR);
  ASSERT_GE(f, 0);
  ASSERT_EQ(flock(f, LOCK_EX), 0);
  const std::vector<uint32_t> leavers = {m[0]->share->slot(), m[1]->share->slot()};
  std::vector<std::thread> leaving;
  for (int i = 0; i < 2; ++i) {
    m[i]->stop_reading();
    leaving.emplace_back([&m, i] { m[i]->share.reset(); });
  }
  while (!all_leaving(ip, leavers)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  flock(f, LOCK_UN);
  close(f);
  for (auto& t : leaving) t.join();
  EXPECT_EQ(UdpShare::rounds_timed_out(), timed_out) << "a round missed a live member";

  // The survivors' slots come to their sockets.
  expect_steered(ip, loopback(50, 1, 2), m, {2, 3});
}

// A process joins while another member is busy and reads its socket late (fio's server beside a
// 1.3 GB/s stream, on a loaded host): the join's round waits for nobody but the joiner, whose
// position is the only one that is new; the others sit where the last round measured them.
// Waiting for every member made the round as slow as the busiest one, and a round after a death
// left a moved socket's traffic astray for that long.
TEST(UdpShareTest, AJoinWaitsOnlyForTheJoiner) {
  UdpShare::set_round_timeout_ms(2000);  // what waiting for the busy member costs: counted below
  const uint32_t ip = loopback(50, 2, 1);
  std::vector<std::unique_ptr<Member>> m;
  for (int i = 0; i < 3; ++i) {
    m.push_back(std::make_unique<Member>());
    ASSERT_TRUE(m.back()->join(ip));
  }
  const uint64_t timed_out = UdpShare::rounds_timed_out();
  m[1]->stop = true;  // busy: reads nothing for now (its socket stays in the group)
  if (m[1]->rx.joinable()) m[1]->rx.join();
  m.push_back(std::make_unique<Member>());
  ASSERT_TRUE(m.back()->join(ip));
  EXPECT_EQ(UdpShare::rounds_timed_out(), timed_out) << "the join waited for the busy member";

  // Every reading member's slot comes to its socket, the joiner's too.
  expect_steered(ip, loopback(50, 2, 2), m, {0, 2, 3});
}

// A member closing its device waits for the registry's lock (a round holds it) with its socket
// still in the group, and its engine stopped: what the kernel brings that socket for another
// member (by hash, or a stale program) it passes on while it waits.
TEST(UdpShareTest, ALeaverWaitingForTheLockPassesOnOtherMembersDatagrams) {
  const uint32_t ip = loopback(50, 4, 1);
  std::vector<std::unique_ptr<Member>> m;
  for (int i = 0; i < 3; ++i) {
    m.push_back(std::make_unique<Member>());
    ASSERT_TRUE(m.back()->join(ip));
  }
  int32_t leaver_pos = -1;
  for (const auto& mb : UdpShare::members(ip, wire::kRoceV2UdpPort))
    if (mb.slot == m[2]->share->slot()) leaver_pos = mb.position;
  ASSERT_GE(leaver_pos, 0);
  // Hold the registry's lock, as a round would.
  const int lockf = open(UdpShare::registry_path(ip, wire::kRoceV2UdpPort).c_str(), O_RDWR);
  ASSERT_GE(lockf, 0);
  ASSERT_EQ(flock(lockf, LOCK_EX), 0);
  const uint32_t leaver_slot = m[2]->share->slot();
  m[2]->stop_reading();
  std::thread leaving([&] { m[2]->share.reset(); });  // waits for the lock
  while (!all_leaving(ip, {leaver_slot})) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Everything to the leaver's socket: a program of one instruction, attached from a socket of
  // the group that then leaves it from the end (which moves nobody).
  {
    const int fd = reuseport_socket(ip);
    ASSERT_GE(fd, 0);
    sock_filter to_leaver[] = {BPF_STMT(BPF_RET | BPF_K, static_cast<uint32_t>(leaver_pos))};
    sock_fprog prog{1, to_leaver};
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog), 0);
    close(fd);
  }
  test::RawSender sender(loopback(50, 4, 2));
  ASSERT_TRUE(sender.ok());
  constexpr int kEach = 20;
  for (int k = 0; k < kEach; ++k) {
    uint8_t pkt[64];
    const uint32_t qpn = m[0]->share->slot() << share::kQpnSlotShift | 0x11;
    const size_t n = test::build_packet(pkt, wire::Opcode::kRcSendOnly, qpn, 0, {});
    ASSERT_TRUE(sender.send_ib(ip, {pkt, n}));
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (m[0]->relayed < kEach && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(m[0]->relayed, kEach);
  EXPECT_EQ(m[0]->mine, 0) << "nothing came to m0's own socket: the program sent all to the leaver";
  flock(lockf, LOCK_UN);
  close(lockf);
  leaving.join();
}

// A last member killed with SIGKILL leaves its registry behind (nobody is left to remove it): the
// next process of the user that joins any group removes it; a registry a live process holds stays.
TEST(UdpShareTest, AJoinerRemovesTheRegistriesOfDeadGroups) {
  const uint32_t dead_ip = loopback(50, 3, 1), live_ip = loopback(50, 3, 2);
  const std::string dead = UdpShare::registry_path(dead_ip, wire::kRoceV2UdpPort);
  const std::string live = UdpShare::registry_path(live_ip, wire::kRoceV2UdpPort);
  Member alive;
  ASSERT_TRUE(alive.join(live_ip));
  // A process that joins, and dies without leaving, as SIGKILL would have it.
  char helper[] = SHARE_JOIN_HELPER;
  char addr[] = "127.50.3.1";
  char* argv[] = {helper, addr, nullptr};
  pid_t child = -1;
  ASSERT_EQ(posix_spawn(&child, helper, nullptr, nullptr, argv, environ), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(access(dead.c_str(), F_OK), 0) << "the dead member's registry is there";
  EXPECT_GE(UdpShare::remove_stale_registries(""), 1u);
  EXPECT_NE(access(dead.c_str(), F_OK), 0) << "removed";
  EXPECT_EQ(access(live.c_str(), F_OK), 0) << "a live member's registry stays";
}

// A process joins while the group's program sends another member's datagrams to the joiner's
// position (a stale program: here one that sends everything there). Its own probe round drains
// the new socket before its engine reads it, and passes on what another member owns; dropping it
// lost a pair's traffic for as long as the round took (shared_device.sh churn).
TEST(UdpShareTest, AJoinersRoundPassesOnOtherMembersDatagrams) {
  // A constant: the stream below reads it without capturing it (clang: -Wunused-lambda-capture).
  constexpr uint32_t ip = loopback(50, 5, 1);
  std::vector<std::unique_ptr<Member>> m;
  for (int i = 0; i < 2; ++i) {
    m.push_back(std::make_unique<Member>());
    m.back()->pass_on = true;
    ASSERT_TRUE(m.back()->join(ip));
  }
  // Position 2 is the joiner's: until its socket is there the kernel picks one by hash.
  {
    const int fd = reuseport_socket(ip);
    ASSERT_GE(fd, 0);
    sock_filter to_joiner[] = {BPF_STMT(BPF_RET | BPF_K, 2u)};
    sock_fprog prog{1, to_joiner};
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog), 0);
    close(fd);
  }
  // A stream for m0 all through the join (its QPN taken here: the vector grows meanwhile).
  std::atomic<bool> joined{false};
  std::atomic<int> sent{0};
  const uint32_t qpn = m[0]->share->slot() << share::kQpnSlotShift | 0x11;
  std::thread stream([&sent, &joined, qpn] {
    test::RawSender sender(loopback(50, 5, 2));
    if (!sender.ok()) return;
    uint8_t pkt[64];
    const size_t n = test::build_packet(pkt, wire::Opcode::kRcSendOnly, qpn, 0, {});
    for (int after = 0; after < 200;) {
      if (!sender.send_ib(ip, {pkt, n})) return;
      ++sent;
      if (joined) ++after;
      std::this_thread::sleep_for(std::chrono::microseconds(5));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  m.push_back(std::make_unique<Member>());
  m.back()->pass_on = true;
  const bool ok = m.back()->join(ip);
  joined = true;
  stream.join();
  ASSERT_TRUE(ok);
  ASSERT_GT(sent, 200);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (m[0]->mine + m[0]->relayed < sent && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(m[0]->mine + m[0]->relayed, sent) << m[0]->relayed << " relayed";
  EXPECT_EQ(m[1]->others + m[2]->others, 0);
}

}  // namespace
}  // namespace uroce
