// Two Devices on loopback addresses with RC QPs exchanging messages through the real engine,
// port and transport.
#include "engine/device.h"
#include "engine/ip_id_guard.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <sys/socket.h>
#include <unistd.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "rc_side.h"
#include "test_util.h"

namespace uroce {
namespace {

using namespace std::chrono_literals;
using test::config;
using test::connect;
using test::gid_of;
using test::loopback;
using test::open_device;
using test::poll_n;
using test::Side;

void post_recvs(Side& s, size_t count, size_t len) {
  for (size_t i = 0; i < count; ++i) {
    transport::RecvWqe w;
    w.wr_id = 1000 + i;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uintptr_t>(s.buf.data() + i * len), static_cast<uint32_t>(len),
                s.lkey};
    size_t bad;
    ASSERT_EQ(s.dev->post_recv(s.qp, &w, 1, &bad), 0);
  }
}

void post_sends(Side& s, size_t count, size_t len, unsigned flags = IBV_SEND_SIGNALED) {
  for (size_t i = 0; i < count; ++i) {
    transport::SendWqe w;
    w.wr_id = i;
    w.opcode = IBV_WR_SEND;
    w.send_flags = flags;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uintptr_t>(s.buf.data() + i * len), static_cast<uint32_t>(len),
                s.lkey};
    size_t bad;
    ASSERT_EQ(s.dev->post_send(s.qp, &w, 1, &bad), 0);
  }
}

TEST(DeviceTest, RcSendsBetweenTwoDevices) {
  constexpr size_t kMsgs = 8, kLen = 3000;  // 3 packets each at MTU 1024
  Side a, b;
  ASSERT_TRUE(a.setup(config("ua", loopback(44, 1, 1)), kMsgs * kLen));
  ASSERT_TRUE(b.setup(config("ub", loopback(44, 1, 2)), kMsgs * kLen));
  EXPECT_GE(a.qp->qpn(), 0x11u);
  connect(a, b);
  connect(b, a);
  for (size_t i = 0; i < a.buf.size(); ++i) a.buf[i] = static_cast<uint8_t>(i * 7 + 3);
  post_recvs(b, kMsgs, kLen);
  post_sends(a, kMsgs, kLen);

  auto rwc = poll_n(*b.rcq, kMsgs);
  ASSERT_EQ(rwc.size(), kMsgs);
  for (size_t i = 0; i < kMsgs; ++i) {
    EXPECT_EQ(rwc[i].status, IBV_WC_SUCCESS) << "status " << rwc[i].status;
    EXPECT_EQ(rwc[i].wr_id, 1000 + i);
    EXPECT_EQ(rwc[i].byte_len, kLen);
  }
  auto swc = poll_n(*a.scq, kMsgs);
  ASSERT_EQ(swc.size(), kMsgs);
  for (size_t i = 0; i < kMsgs; ++i) {
    EXPECT_EQ(swc[i].status, IBV_WC_SUCCESS) << "status " << swc[i].status;
    EXPECT_EQ(swc[i].wr_id, i);
  }
  EXPECT_EQ(a.buf, b.buf);
  EXPECT_GE(b.dev->counters().rcvd_pkts.get(), kMsgs * 3);
  EXPECT_EQ(b.dev->counters().rcvd_icrc_err.get(), 0u);
  EXPECT_EQ(b.dev->counters().rx_unknown_qp.get(), 0u);
}

TEST(DeviceTest, RcSendsSurviveInjectedLoss) {
  constexpr size_t kMsgs = 20, kLen = 2000;
  FaultConfig lossy;
  lossy.rx_loss = 0.1;
  lossy.seed = 7;
  Side a, b;
  ASSERT_TRUE(a.setup(config("ua", loopback(44, 2, 1), lossy), kMsgs * kLen));
  ASSERT_TRUE(b.setup(config("ub", loopback(44, 2, 2), lossy), kMsgs * kLen));
  connect(a, b, 12);  // 4.096 us * 2^12 = 17 ms: 8 tries outlast a loaded host's scheduling
  connect(b, a, 12);
  for (size_t i = 0; i < a.buf.size(); ++i) a.buf[i] = static_cast<uint8_t>(i ^ 0x5a);
  post_recvs(b, kMsgs, kLen);
  post_sends(a, kMsgs, kLen);
  auto rwc = poll_n(*b.rcq, kMsgs, 10000ms);
  ASSERT_EQ(rwc.size(), kMsgs);
  for (const auto& wc : rwc) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  auto swc = poll_n(*a.scq, kMsgs, 10000ms);
  ASSERT_EQ(swc.size(), kMsgs);
  for (const auto& wc : swc) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(a.buf, b.buf);
  EXPECT_GT(a.dev->counters().fault_drops.get() + b.dev->counters().fault_drops.get(), 0u);
}

TEST(DeviceTest, ManyQpsUnderLossAllComplete) {
  // Several QPs per device, each with its own retransmission timer: exercises the engine's timer
  // heap and pump list with deadlines of many QPs interleaved.
  constexpr size_t kPairs = 8, kMsgs = 6, kLen = 1500;
  FaultConfig lossy;
  lossy.rx_loss = 0.15;
  lossy.seed = 11;
  std::vector<std::unique_ptr<Side>> as, bs;
  for (size_t i = 0; i < kPairs; ++i) {
    as.push_back(std::make_unique<Side>());
    bs.push_back(std::make_unique<Side>());
  }
  // One device per side, shared by all pairs: the first Side opens it, the others borrow it
  // (as[0] is destroyed first, stopping device A before the borrowers' CQs and buffers go).
  ASSERT_TRUE(as[0]->setup(config("ua", loopback(44, 8, 1), lossy), kMsgs * kLen));
  ASSERT_TRUE(bs[0]->setup(config("ub", loopback(44, 8, 2), lossy), kMsgs * kLen));
  for (size_t i = 1; i < kPairs; ++i) {
    ASSERT_TRUE(as[i]->attach(*as[0]->dev, kMsgs * kLen));
    ASSERT_TRUE(bs[i]->attach(*bs[0]->dev, kMsgs * kLen));
  }
  for (size_t i = 0; i < kPairs; ++i) {
    Side& a = *as[i];
    Side& b = *bs[i];
    connect(a, b, 12);
    connect(b, a, 12);
    for (size_t k = 0; k < a.buf.size(); ++k) a.buf[k] = static_cast<uint8_t>(k * (i + 3));
    post_recvs(b, kMsgs, kLen);
    post_sends(a, kMsgs, kLen);
  }
  for (size_t i = 0; i < kPairs; ++i) {
    auto rwc = poll_n(*bs[i]->rcq, kMsgs, 10000ms);
    ASSERT_EQ(rwc.size(), kMsgs) << "pair " << i;
    for (const auto& wc : rwc) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    auto swc = poll_n(*as[i]->scq, kMsgs, 10000ms);
    ASSERT_EQ(swc.size(), kMsgs) << "pair " << i;
    EXPECT_EQ(as[i]->buf, bs[i]->buf) << "pair " << i;
  }
  EXPECT_GT(as[0]->dev->counters().fault_drops.get() + bs[0]->dev->counters().fault_drops.get(),
            0u);
}

TEST(DeviceTest, RetransmissionTimerRunsOnTheEngineUntilRetriesAreExhausted) {
  // Every packet to B is lost, so nothing but the engine's timer can make progress: A must
  // retransmit retry_cnt times and then complete with IBV_WC_RETRY_EXC_ERR.
  FaultConfig black_hole;
  black_hole.rx_loss = 1.0;
  Side a, b;
  ASSERT_TRUE(a.setup(config("ua", loopback(44, 9, 1)), 256));
  ASSERT_TRUE(b.setup(config("ub", loopback(44, 9, 2), black_hole), 256));
  connect(a, b, 8);  // ~1 ms per attempt
  connect(b, a, 8);
  post_recvs(b, 1, 64);
  post_sends(a, 1, 64);
  auto swc = poll_n(*a.scq, 1, 5000ms);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_RETRY_EXC_ERR) << "status " << swc[0].status;
  // The first transmission and retry_cnt (7) retransmissions, all dropped — once B's engine has
  // read them: on a loaded host it can be milliseconds behind A's last timeout (seen: 3 of 8 at
  // A's completion). A's QP is in error now and sends nothing more.
  const Counter& drops = b.dev->counters().fault_drops;
  for (int i = 0; i < 2000 && drops.get() < 8; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(drops.get(), 8u);
}

TEST(DeviceTest, SolicitedSendFiresASolicitedOnlyNotification) {
  Side a, b;
  ASSERT_TRUE(a.setup(config("ua", loopback(44, 3, 1)), 4096));
  ASSERT_TRUE(b.setup(config("ub", loopback(44, 3, 2)), 4096));
  connect(a, b);
  connect(b, a);
  post_recvs(b, 2, 64);
  ASSERT_EQ(b.rcq->req_notify(true), 0);
  post_sends(a, 1, 64);  // not solicited: no event
  ASSERT_EQ(poll_n(*b.rcq, 1).size(), 1u);
  EXPECT_EQ(b.channel->pending(), 0u);
  post_sends(a, 1, 64, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
  ASSERT_TRUE(test::wait_readable(b.channel->fd(), 2000));
  void* cookie;
  ASSERT_EQ(b.channel->get_event(&cookie), 0);
  EXPECT_EQ(cookie, &b);
}

TEST(DeviceTest, StrayAndCorruptPacketsAreCountedDrops) {
  const uint32_t ip = loopback(44, 4, 1);
  auto d = open_device(config("ua", ip));
  ASSERT_TRUE(d);
  test::RawSender s(loopback(44, 4, 2));
  uint8_t ib[64];
  size_t n = test::build_packet(ib, wire::Opcode::kRcSendOnly, 0x999, 1, {});
  ASSERT_TRUE(s.send_ib(ip, {ib, n}));        // no such QP
  ASSERT_TRUE(s.send_ib(ip, {ib, n}, 0, 6));  // corrupt
  auto end = std::chrono::steady_clock::now() + 2s;
  while (d->counters().rcvd_pkts.get() < 2 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);  // the batch's dispatch follows its count
  EXPECT_EQ(d->counters().rx_unknown_qp.get(), 1u);
  EXPECT_EQ(d->counters().rcvd_icrc_err.get(), 1u);
}

// The socket datapath cannot see the IP ID and accepts the one that makes the ICRC valid
// (engine/ip_id_guard.h): from a source that has only sent small IDs (uroce's socket port) a
// datagram that only a large ID validates — a corrupted one, as far as anyone can tell — is
// refused and counted, while a source that counts its IDs (rxe, an RNIC) is accepted from its
// first datagram.
TEST(DeviceTest, ADatagramValidOnlyUnderAnIdItsSourceNeverUsesIsRefused) {
  const uint32_t ip = loopback(44, 11, 1);
  auto d = open_device(config("ua", ip));
  ASSERT_TRUE(d);
  test::RawSender small_ids(loopback(44, 11, 2)), counting(loopback(44, 11, 3));
  uint8_t ib[64];
  const size_t n = test::build_packet(ib, wire::Opcode::kRcSendOnly, 0x999, 1, {});
  const uint64_t trusted = IpIdGuard::kTrusted;
  for (uint64_t i = 0; i < trusted; ++i) ASSERT_TRUE(small_ids.send_ib(ip, {ib, n}, 0));
  ASSERT_TRUE(small_ids.send_ib(ip, {ib, n}, 0x4321));
  ASSERT_TRUE(small_ids.send_ib(ip, {ib, n}, 0));
  ASSERT_TRUE(counting.send_ib(ip, {ib, n}, 0x4321));
  ASSERT_TRUE(counting.send_ib(ip, {ib, n}, 0x4322));
  const uint64_t total = trusted + 4;
  auto end = std::chrono::steady_clock::now() + 5s;
  while (d->counters().rx_unknown_qp.get() + d->counters().rcvd_icrc_err.get() < total &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(d->counters().rx_icrc_suspect.get(), 1u);
  EXPECT_EQ(d->counters().rcvd_icrc_err.get(), 1u);
  EXPECT_EQ(d->counters().rx_unknown_qp.get(), total - 1);  // every other one reached dispatch
  EXPECT_EQ(d->counters().rx_foreign_ip_id.get(), 2u);
}

TEST(DeviceTest, RandomPacketsToALiveQpNeverCrash) {
  // Valid-ICRC datagrams with random opcodes, flags and payloads aimed at a connected QP: the
  // engine and transport must drop or handle each one; afterwards the QPs must still work.
  Side a, b;
  ASSERT_TRUE(a.setup(config("ua", loopback(44, 10, 1)), 8192));
  ASSERT_TRUE(b.setup(config("ub", loopback(44, 10, 2)), 8192));
  connect(a, b);
  connect(b, a);
  post_recvs(b, 4, 1024);
  test::RawSender s(loopback(44, 10, 3));
  uint64_t x = 0xfeedface;
  auto rnd = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::vector<uint8_t> d;
  for (int i = 0; i < 3000; ++i) {
    d.resize(12 + rnd() % 100);
    for (auto& byte : d) byte = static_cast<uint8_t>(rnd());
    d[1] &= 0xf0;  // TVer 0
    uint32_t qpn = b.qp->qpn();
    d[5] = static_cast<uint8_t>(qpn >> 16);
    d[6] = static_cast<uint8_t>(qpn >> 8);
    d[7] = static_cast<uint8_t>(qpn);
    ASSERT_TRUE(s.send_ib(b.dev->ipv4(), d));
    if (i % 100 == 99) std::this_thread::sleep_for(1ms);  // let the engine keep up
  }
  std::this_thread::sleep_for(50ms);
  EXPECT_GT(b.dev->counters().rcvd_pkts.get(), 0u);
  // The device still serves its QPs (whether b's QP survived the garbage is the transport's
  // business; a fresh pair must work).
  Side c, e;
  ASSERT_TRUE(c.attach(*a.dev, 4096));
  ASSERT_TRUE(e.attach(*b.dev, 4096));
  connect(c, e);
  connect(e, c);
  post_recvs(e, 1, 64);
  post_sends(c, 1, 64);
  auto rwc = poll_n(*e.rcq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(c.dev->destroy_qp(c.qp), 0);
  ASSERT_EQ(e.dev->destroy_qp(e.qp), 0);
}

TEST(DeviceTest, OpenFailsWhenTheAddressIsTakenByAProgramThatDoesNotShare) {
  // A socket without SO_REUSEPORT on address:4791 (rxe, a uroce process with UROCE_SHARE=0): the
  // kernel keeps the address for it.
  const uint32_t ip = loopback(44, 5, 1);
  DeviceConfig alone = config("ua", ip);
  alone.share = false;
  auto d = open_device(alone);
  ASSERT_TRUE(d);
  std::string err;
  EXPECT_EQ(Device::open(config("ub", ip), &err), nullptr);
  EXPECT_NE(err.find("ub"), std::string::npos) << err;
  EXPECT_NE(err.find("in use"), std::string::npos) << err;
}

// a SENDs b `count` messages of `len` bytes of a pattern; both sides complete every one, and b's
// buffer ends up equal to a's.
void send_and_check(Side& a, Side& b, size_t count, size_t len) {
  for (size_t i = 0; i < a.buf.size(); ++i) a.buf[i] = static_cast<uint8_t>(i * 5 + 1);
  post_recvs(b, count, len);
  post_sends(a, count, len);
  auto rwc = poll_n(*b.rcq, count);
  ASSERT_EQ(rwc.size(), count);
  for (const auto& wc : rwc) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  auto swc = poll_n(*a.scq, count);
  ASSERT_EQ(swc.size(), count);
  for (const auto& wc : swc) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(a.buf, b.buf);
}

TEST(DeviceTest, TwoDevicesShareOneAddressAndExchangeRcTraffic) {
  // What two processes opening uroce0=<one address> do, in one process: each open takes a slot
  // of the address's group, numbers its QPs in its slot, and the steering program brings each
  // datagram to the device that owns its destination QP.
  constexpr size_t kMsgs = 8, kLen = 3000;
  // An address of its own: EngineGoesIdleAfterTraffic's device on 127.0.44.7.1 counted this
  // test's probe rounds as its wake-ups when ctest ran the two at once.
  const uint32_t ip = loopback(44, 16, 1);
  Side a, b;
  ASSERT_TRUE(a.setup(config("ua", ip), kMsgs * kLen));
  ASSERT_TRUE(b.setup(config("ub", ip), kMsgs * kLen));
  ASSERT_NE(a.dev->port_share(), nullptr);
  EXPECT_NE(a.qp->qpn() >> 17, b.qp->qpn() >> 17) << "each QPN names its device's slot";
  connect(a, b);
  connect(b, a);
  send_and_check(a, b, kMsgs, kLen);
  // Nothing went to the wrong device.
  EXPECT_EQ(a.dev->counters().rx_unknown_qp.get(), 0u);
  EXPECT_EQ(b.dev->counters().rx_unknown_qp.get(), 0u);
}

TEST(DeviceTest, ADatagramTheSteeringSendsAstrayIsRelayedToItsOwner) {
  // A stale program (members came or went, and the round that measures them again has not ended)
  // brings datagrams to the wrong process. Here one that sends everything to the group's first
  // socket (a's) is attached from a socket of the group that is no member, and closed again from
  // the end, which moves nobody: a must pass b's packets on, and the exchange runs as before.
  constexpr size_t kMsgs = 16, kLen = 3000;
  const uint32_t ip = loopback(44, 18, 1);
  Side a, b;
  ASSERT_TRUE(a.setup(config("ua", ip), kMsgs * kLen));
  ASSERT_TRUE(b.setup(config("ub", ip), kMsgs * kLen));
  {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    int on = 1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(ip);
    addr.sin_port = htons(wire::kRoceV2UdpPort);
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on), 0);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    sock_filter first[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
    sock_fprog prog{1, first};
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog), 0);
    close(fd);
  }
  connect(a, b);
  connect(b, a);
  send_and_check(a, b, kMsgs, kLen);
  const PortCounters& pa = a.dev->counters().port;
  const PortCounters& pb = b.dev->counters().port;
  // Each of a's packets came to a and went on to b (a resent one may still be on its way).
  EXPECT_GE(pa.rx_share_relayed_out.get(), kMsgs);
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (pb.rx_share_relayed_in.get() < pa.rx_share_relayed_out.get() &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(pb.rx_share_relayed_in.get(), pa.rx_share_relayed_out.get());
  EXPECT_EQ(pa.rx_share_relay_failed.get(), 0u);
  EXPECT_EQ(a.dev->counters().rx_unknown_qp.get(), 0u);
  EXPECT_EQ(b.dev->counters().rx_unknown_qp.get(), 0u);
}

TEST(DeviceTest, APacketForAnotherSlotIsCountedWhereItLands) {
  // Slot 5 has no process: the kernel picks a socket by hash, here the only one. The device
  // counts it as an unknown QP and as one for another slot; a packet for a QP of its own slot
  // that does not exist (destroyed, say) only as an unknown QP.
  const uint32_t ip = loopback(44, 13, 1);
  auto d = open_device(config("ua", ip));
  ASSERT_TRUE(d);
  ASSERT_NE(d->port_share(), nullptr);
  test::RawSender s(loopback(44, 13, 2));
  uint8_t ib[64];
  size_t n = test::build_packet(ib, wire::Opcode::kRcSendOnly, 5u << 17 | 0x11, 1, {});
  ASSERT_TRUE(s.send_ib(ip, {ib, n}));
  n = test::build_packet(ib, wire::Opcode::kRcSendOnly, d->port_share()->qpn_base() | 0x999, 1, {});
  ASSERT_TRUE(s.send_ib(ip, {ib, n}));
  auto end = std::chrono::steady_clock::now() + 2s;
  while (d->counters().rx_unknown_qp.get() < 2 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(d->counters().rx_unknown_qp.get(), 2u);
  EXPECT_EQ(d->counters().port.rx_share_other_slot.get(), 1u);
}

TEST(DeviceTest, AClaimedCmPortIsInUseForTheOtherDevicesOfTheAddress) {
  const uint32_t ip = loopback(44, 17, 1);
  auto a = open_device(config("ua", ip));
  auto b = open_device(config("ub", ip));
  ASSERT_TRUE(a && b);
  PortShare* sa = a->port_share();
  PortShare* sb = b->port_share();
  ASSERT_TRUE(sa && sb);
  EXPECT_NE(sa->comm_id_base(), sb->comm_id_base());
  EXPECT_EQ(sa->claim_service(0x0106, 7471), 0);
  EXPECT_EQ(sa->claim_service(0x0106, 7471), 0) << "a process's own ids share their claims";
  EXPECT_EQ(sb->claim_service(0x0106, 7471), EADDRINUSE);
  EXPECT_EQ(sb->claim_service(0x0111, 7471), 0) << "another port space";
  sa->release_service(0x0106, 7471);
  EXPECT_EQ(sb->claim_service(0x0106, 7471), EADDRINUSE) << "one claim of two released";
  sa->release_service(0x0106, 7471);
  EXPECT_EQ(sb->claim_service(0x0106, 7471), 0);
}

TEST(DeviceTest, QpAndPdLifecycle) {
  Side a;
  ASSERT_TRUE(a.setup(config("ua", loopback(44, 6, 1)), 64));
  EXPECT_EQ(a.qp->qpn(), 0x11u);  // the first QPN; 0 and 1 are special
  EXPECT_EQ(a.dev->dealloc_pd(a.pd), EBUSY);
  transport::QpInit init;
  init.pd = a.pd + 100;  // no such PD
  init.send_cq = a.scq.get();
  init.recv_cq = a.rcq.get();
  init.max_send_wr = init.max_recv_wr = 4;
  int err = 0;
  EXPECT_EQ(a.dev->create_qp(init, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  init.pd = a.pd;
  init.recv_cq = nullptr;
  EXPECT_EQ(a.dev->create_qp(init, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(a.dev->destroy_qp(a.qp), 0);
  EXPECT_EQ(a.dev->qp_count(), 0u);
  EXPECT_EQ(a.dev->dereg_mr(a.lkey), 0);
  EXPECT_EQ(a.dev->dealloc_pd(a.pd), 0);
  EXPECT_EQ(a.dev->gid().raw[15], 1);
  EXPECT_EQ(a.dev->mtu_bytes(), 4096);  // lo's MTU is 65536
}

// The ACK an application's receive pass holds for that thread's next call (Datapath::Hold) leaves
// at once when the call is neither a post nor a poll — here ibv_alloc_pd — instead of waiting
// for the engine's next look (up to its handoff time) or for the next post: a receiver that
// sets up (a PD, MRs, QPs) after a message held back the sender's completion. Nothing else can send
// the ACK while the test waits: the receiver's engine looks only after its handoff (600 s here),
// the sender retransmits after its ACK timeout (Timeout 24: 69 s), its early-retransmit probes
// are off, and so is publishing to `uroce stats` (its snapshots wake the engine every 100 ms).
TEST(DeviceTest, AnAckHeldForTheNextCallLeavesAtACallThatIsNotAPost) {
  test::PublishEnv no_publishing("0");
  Side a, b;
  DeviceConfig ca = config("ua", loopback(44, 12, 1));
  ca.early_retransmit = false;
  constexpr int kTries = 16;
  ASSERT_TRUE(a.setup(ca, 64));
  ASSERT_TRUE(b.setup(config("ub", loopback(44, 12, 2)), kTries * 16));
  connect(a, b, /*timeout=*/24);
  connect(b, a, /*timeout=*/24);
  b.dev->set_handoff_ns(600'000'000'000);
  post_recvs(b, kTries, 16);
  // b's application polls from before the first SEND. Its engine may still take that one (it
  // was asleep on the socket before the first poll) and ACK it at once; from its next look it
  // leaves receiving to the polling application (Engine::run), so a later SEND is the
  // application's.
  b.dev->poll_progress();
  bool tested = false;
  for (int i = 0; i < kTries && !tested; ++i) {
    post_sends(a, 1, 16);
    bool by_app = false;
    ibv_wc wc{};
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    int got = 0;
    while (got == 0 && std::chrono::steady_clock::now() < give_up) {
      by_app = b.dev->poll_progress() || by_app;
      got = b.rcq->poll(1, &wc);
      b.dev->note_poll_result(got > 0);
    }
    ASSERT_EQ(got, 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    if (by_app) {
      b.dev->dealloc_pd(b.dev->alloc_pd());  // the set-up call: the held ACK leaves with it
      tested = true;
    }
    const auto swc = poll_n(*a.scq, 1, 30'000ms);
    ASSERT_EQ(swc.size(), 1u) << "SEND " << i << (by_app ? ", received by b's application" : "");
    EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
    if (!by_app) {
      // Polling on, while nothing is held, and on an empty CQ: an application that took a
      // completion and then stayed away would make the engine receive beside it (Engine::run).
      b.dev->poll_progress();
      b.dev->note_poll_result(false);
    }
  }
  EXPECT_TRUE(tested) << "b's engine received every SEND itself";
}

// fio's rdma server: its thread sleeps in ibv_get_cq_event (armed, nothing will complete) while
// the client RDMA WRITEs into its memory, and a WRITE completes at the client only with its ACK.
// The sleeping thread receives the WRITEs itself; an ACK its pass holds for the next post (there
// is none) must leave before it sleeps again. Nothing else can send them here: b's engine looks
// only after its handoff (600 s), a retransmits after its ACK timeout (Timeout 24: 69 s) and its
// early-retransmit probes are off, publishing too (see the test above). Before: each WRITE waited
// for b's engine thread, milliseconds (fio verb=write ran at 11 MB/s).
TEST(DeviceTest, AThreadAsleepInGetCqEventSendsTheAcksOfTheWritesItReceived) {
  test::PublishEnv no_publishing("0");
  Side a, b;
  DeviceConfig ca = config("ua", loopback(44, 15, 1));
  ca.early_retransmit = false;
  ASSERT_TRUE(a.setup(ca, 4096));
  ASSERT_TRUE(b.setup(config("ub", loopback(44, 15, 2)), 4096));
  connect(a, b, /*timeout=*/24);
  connect(b, a, /*timeout=*/24);
  b.dev->set_handoff_ns(600'000'000'000);
  ASSERT_EQ(b.rcq->req_notify(false), 0);
  std::atomic<int> woke{-1};
  std::thread sleeper([&] {
    void* cookie = nullptr;
    woke = b.dev->get_cq_event(*b.channel, &cookie);
  });
  constexpr int kWrites = 50;
  for (int i = 0; i < kWrites; ++i) {
    a.buf[0] = static_cast<uint8_t>(i);
    transport::SendWqe w;
    w.wr_id = static_cast<uint64_t>(i);
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.num_sge = 1;
    w.sge[0] = {reinterpret_cast<uintptr_t>(a.buf.data()), 256, a.lkey};
    w.remote_addr = reinterpret_cast<uintptr_t>(b.buf.data());
    w.rkey = b.rkey;
    size_t bad;
    ASSERT_EQ(a.dev->post_send(a.qp, &w, 1, &bad), 0);
    const auto wc = poll_n(*a.scq, 1, 30'000ms);
    ASSERT_EQ(wc.size(), 1u) << "WRITE " << i << ": no ACK";
    ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(b.buf[0], static_cast<uint8_t>(i));
  }
  b.channel->notify(nullptr);  // wakes the sleeper
  sleeper.join();
  EXPECT_EQ(woke.load(), 0);
}

// A program that polls its completion channel's fd in its own loop (non-blocking, as UCX and
// librpma do) and calls ibv_get_cq_event when it is readable: once it has looked at its channel,
// the channel's set holds the port's wait fds while the application has the receive side, so each
// SEND wakes that poll() itself and its get receives it — the engine thread runs no pass at all
// (before: the engine received each one and raised the event, two wake-ups per message). b's
// engine looks only after its handoff (600 s here) and publishes nothing, so a pass of its own
// could only come from a datagram it watched for.
TEST(DeviceTest, AProgramPollingItsChannelFdIsWokenByTheDatagramAndReceivesIt) {
  test::PublishEnv no_publishing("0");
  Side a, b;
  constexpr int kMessages = 20;
  ASSERT_TRUE(a.setup(config("ua", loopback(44, 19, 1)), 64));
  ASSERT_TRUE(b.setup(config("ub", loopback(44, 19, 2)), kMessages * 64));
  connect(a, b);
  connect(b, a);
  b.dev->set_handoff_ns(600'000'000'000);
  ASSERT_EQ(fcntl(b.channel->fd(), F_SETFL, fcntl(b.channel->fd(), F_GETFL) | O_NONBLOCK), 0);
  post_recvs(b, kMessages, 64);
  ASSERT_EQ(b.rcq->req_notify(false), 0);
  void* cookie = nullptr;
  // Its first look: no event yet, and from now on the channel watches the port. (Its pass takes
  // the receive side when the policy lock is free: the engine may hold it a moment.)
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (!b.channel->watching() && std::chrono::steady_clock::now() < give_up)
    ASSERT_EQ(b.dev->get_cq_event(*b.channel, &cookie), EAGAIN);
  ASSERT_TRUE(b.channel->watching());
  const uint64_t engine_passes = b.dev->counters().engine_wakeups.get();
  const uint64_t app_passes = b.dev->counters().app_progress_passes.get();
  for (int i = 0; i < kMessages; ++i) {
    post_sends(a, 1, 16);
    int rc = EAGAIN;
    while (rc == EAGAIN) {
      pollfd p{b.channel->fd(), POLLIN, 0};
      ASSERT_EQ(poll(&p, 1, 30'000), 1) << "message " << i << ": the channel's fd never woke";
      rc = b.dev->get_cq_event(*b.channel, &cookie);
    }
    ASSERT_EQ(rc, 0);
    ibv_wc wc{};
    ASSERT_EQ(b.rcq->poll(1, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(b.rcq->req_notify(false), 0);
    // As UCX before it sleeps again: a look at the channel after arming, which finds nothing and
    // sends the ACK its pass held for a reply that does not come.
    ASSERT_EQ(b.dev->get_cq_event(*b.channel, &cookie), EAGAIN);
    ASSERT_EQ(poll_n(*a.scq, 1, 30'000ms).size(), 1u) << "message " << i << ": no ACK";
  }
  EXPECT_EQ(b.dev->counters().engine_wakeups.get(), engine_passes)
      << "b's engine thread received although the program's own poll() watched the port";
  EXPECT_GE(b.dev->counters().app_progress_passes.get() - app_passes, uint64_t{kMessages});
}

TEST(DeviceTest, EngineGoesIdleAfterTraffic) {
  Side a, b;
  ASSERT_TRUE(a.setup(config("ua", loopback(44, 7, 1)), 64 * 8));
  ASSERT_TRUE(b.setup(config("ub", loopback(44, 7, 2)), 64 * 8));
  connect(a, b);
  connect(b, a);
  post_recvs(b, 4, 64);
  post_sends(a, 4, 64);
  ASSERT_EQ(poll_n(*a.scq, 4).size(), 4u);
  // Acknowledged and complete: after any ACK-coalescing timer, neither engine should wake again.
  std::this_thread::sleep_for(200ms);
  uint64_t wa = a.dev->counters().engine_wakeups.get() + b.dev->counters().engine_wakeups.get();
  std::this_thread::sleep_for(300ms);
  uint64_t wb = a.dev->counters().engine_wakeups.get() + b.dev->counters().engine_wakeups.get();
  EXPECT_LE(wb - wa, 2u);
}

}  // namespace
}  // namespace uroce

namespace uroce {
namespace {

// Reads a pcap file written by PcapWriter: the records' bytes (each an IPv4 datagram).
std::vector<std::vector<uint8_t>> read_pcap(const std::string& path, uint32_t* linktype) {
  std::vector<std::vector<uint8_t>> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  uint32_t hdr[6];
  if (std::fread(hdr, sizeof hdr, 1, f) == 1 && hdr[0] == 0xa1b23c4d) {
    *linktype = hdr[5];
    uint32_t rec[4];
    while (std::fread(rec, sizeof rec, 1, f) == 1) {
      std::vector<uint8_t> d(rec[2]);
      if (rec[2] > 65535 || std::fread(d.data(), 1, d.size(), f) != d.size()) break;
      out.push_back(std::move(d));
    }
  }
  std::fclose(f);
  return out;
}

TEST(DeviceTest, CaptureFileHoldsEveryPacketWithAValidIcrc) {
  constexpr size_t kMsgs = 4, kLen = 2500;  // 3 packets each at MTU 1024
  const std::string path = ::testing::TempDir() + "uroce_capture_test.pcap";
  DeviceConfig ca = config("ca", loopback(46, 1, 1));
  ca.pcap_path = path;
  {
    Side a, b;
    ASSERT_TRUE(a.setup(ca, kMsgs * kLen));
    ASSERT_TRUE(b.setup(config("cb", loopback(46, 1, 2)), kMsgs * kLen));
    connect(a, b);
    connect(b, a);
    post_recvs(b, kMsgs, kLen);
    post_sends(a, kMsgs, kLen);
    ASSERT_EQ(poll_n(*a.scq, kMsgs).size(), kMsgs);
  }  // closing the devices flushes nothing more: every record is written whole when it happens

  uint32_t linktype = 0;
  auto recs = read_pcap(path, &linktype);
  std::remove(path.c_str());
  EXPECT_EQ(linktype, 228u);  // LINKTYPE_IPV4
  size_t sends = 0, acks = 0;
  for (const auto& r : recs) {
    ASSERT_GE(r.size(), 20u + 8 + wire::kBthBytes + wire::kIcrcBytes);
    // The rebuilt IPv4/UDP headers carry what the ICRC covers, so the recorded ICRC verifies.
    std::span<const uint8_t> ip(r.data(), r.size() - wire::kIcrcBytes);
    EXPECT_EQ(wire::icrc_ipv4(ip), wire::load_le32(r.data() + r.size() - wire::kIcrcBytes));
    EXPECT_EQ(r[9], 17);                  // UDP
    EXPECT_EQ(r[22] << 8 | r[23], 4791);  // destination port
    uint8_t op = r[28];
    if (op <= 0x04) ++sends;
    if (op == 0x11) ++acks;
  }
  EXPECT_EQ(sends, kMsgs * 3);  // sent by a, nothing lost
  EXPECT_GE(acks, 1u);          // received by a
}

TEST(DeviceTest, QpCountersSurviveTheQp) {
  Side a, b;
  ASSERT_TRUE(a.setup(config("sa", loopback(46, 1, 3)), 4096));
  ASSERT_TRUE(b.setup(config("sb", loopback(46, 1, 4)), 4096));
  connect(a, b);
  connect(b, a);
  post_recvs(b, 1, 1000);
  post_sends(a, 1, 1000);
  ASSERT_EQ(poll_n(*a.scq, 1).size(), 1u);
  uint64_t sent = a.dev->qp_counter_totals().sent_pkts;
  EXPECT_GE(sent, 1u);
  ASSERT_EQ(a.dev->destroy_qp(a.qp), 0);
  a.qp = nullptr;
  EXPECT_EQ(a.dev->qp_counter_totals().sent_pkts, sent);  // kept after the QP is gone

  char* text = nullptr;
  size_t len = 0;
  FILE* mem = open_memstream(&text, &len);
  a.dev->print_stats(mem);
  std::fclose(mem);
  std::string s(text, len);
  std::free(text);
  EXPECT_NE(s.find("sa (127.46.1.3) counters:"), std::string::npos) << s;
  EXPECT_NE(s.find("qp_sent_pkts"), std::string::npos) << s;
  EXPECT_EQ(s.find("rcvd_icrc_err"), std::string::npos) << "zero counters are left out:\n" << s;
}

}  // namespace
}  // namespace uroce
