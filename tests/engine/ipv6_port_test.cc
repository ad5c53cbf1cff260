// The IPv6 side of the kernel-UDP port and its configuration: UROCE_DEVICES' IPv6 addresses, the
// control messages of an IPv6 socket (IPV6_TCLASS, IPV6_RECVERR with an ICMPv6 sender), and two
// ports on ::1 (different UDP ports: ::1 is one address) exchanging packets through the receive
// pipeline — exact ICRC, ECN both ways, a destination of the other family dropped, ICMPv6 port
// unreachable as a PortEvent, no multicast.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "engine/config.h"
#include "engine/datapath.h"
#include "engine/engine.h"
#include "ports/udp/cmsg.h"
#include "ports/udp/udp_port.h"
#include "test_util.h"
#include "wire/wire.h"

namespace uroce {
namespace {

wire::IpAddr v6(const char* text) {
  auto a = wire::IpAddr::parse(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(wire::IpAddr{});
}

TEST(Ipv6Config, ParsesIpv6AddressesAndZones) {
  std::string err;
  auto r = parse_devices("a=::1,b=127.0.0.1,c=fe80::1%lo,d=::ffff:10.1.2.3", &err);
  ASSERT_TRUE(r.has_value()) << err;
  ASSERT_EQ(r->size(), 4u);
  EXPECT_TRUE((*r)[0].is_ipv6());
  EXPECT_EQ((*r)[0].ipv6, v6("::1"));
  EXPECT_EQ((*r)[0].ipv4, 0u);
  EXPECT_EQ((*r)[0].addr(), v6("::1"));
  EXPECT_EQ((*r)[0].netdev, "lo");  // ::1 is configured on lo
  EXPECT_FALSE((*r)[1].is_ipv6());
  EXPECT_EQ((*r)[1].addr(), wire::IpAddr(0x7f000001u));
  EXPECT_EQ((*r)[2].ipv6, v6("fe80::1"));
  EXPECT_EQ((*r)[2].scope_id, if_nametoindex("lo"));
  EXPECT_EQ((*r)[2].netdev, "lo");
  EXPECT_EQ(format_device_addr((*r)[2]), "fe80::1%lo");
  EXPECT_EQ(format_device_addr((*r)[0]), "::1");
  // IPv4-mapped text is the IPv4 address.
  EXPECT_FALSE((*r)[3].is_ipv6());
  EXPECT_EQ((*r)[3].ipv4, 0x0a010203u);
}

TEST(Ipv6Config, RejectsWhatCannotBeADeviceAddress) {
  const std::pair<const char*, const char*> cases[] = {
      {"a=::", "not unicast"},
      {"a=ff02::1", "not unicast"},
      {"a=fe80::1", "needs its interface"},
      {"a=fe80::1%nosuchif9", "nosuchif9"},
      {"a=fd00::1::2", "bad IPv6 address"},
      {"a=::1,b=::1", "used by two devices"},
      {"a=::1,b=0:0::1", "used by two devices"},
  };
  for (const auto& [spec, token] : cases) {
    std::string err;
    EXPECT_FALSE(parse_devices(spec, &err).has_value()) << spec;
    EXPECT_NE(err.find("UROCE_DEVICES"), std::string::npos) << err;
    EXPECT_NE(err.find(token), std::string::npos) << spec << ": '" << token << "' not in " << err;
  }
}

// A control-message buffer holding one message of `level`/`type` with `payload`.
struct Cmsg {
  alignas(cmsghdr) uint8_t buf[CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in6))] = {};
  msghdr h{};
  Cmsg(int level, int type, const void* payload, size_t len) {
    h.msg_control = buf;
    h.msg_controllen = CMSG_SPACE(len);
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = level;
    c->cmsg_type = type;
    c->cmsg_len = CMSG_LEN(len);
    std::memcpy(CMSG_DATA(c), payload, len);
  }
};

TEST(Ipv6Cmsg, TrafficClassAndIcmpv6ErrorsAreRead) {
  const int tclass = 26 << 2 | 3;  // DSCP 26, CE
  Cmsg t(IPPROTO_IPV6, IPV6_TCLASS, &tclass, sizeof tclass);
  EXPECT_EQ(parse_rx_control(t.h).tos, tclass);

  uint8_t err[sizeof(sock_extended_err) + sizeof(sockaddr_in6)] = {};
  sock_extended_err ee{};
  ee.ee_errno = ECONNREFUSED;
  ee.ee_origin = SO_EE_ORIGIN_ICMP6;
  ee.ee_type = 1;  // destination unreachable (RFC 4443)
  ee.ee_code = 4;  // port unreachable
  sockaddr_in6 from{};
  from.sin6_family = AF_INET6;
  ASSERT_EQ(inet_pton(AF_INET6, "fd00::9", &from.sin6_addr), 1);
  std::memcpy(err, &ee, sizeof ee);
  std::memcpy(err + sizeof ee, &from, sizeof from);
  Cmsg e(IPPROTO_IPV6, IPV6_RECVERR, err, sizeof err);
  const RxControl c = parse_rx_control(e.h);
  ASSERT_TRUE(c.error.has_value());
  EXPECT_EQ(c.error->ee_origin, SO_EE_ORIGIN_ICMP6);
  EXPECT_EQ(c.error->ee_code, 4);
  EXPECT_EQ(c.error_offender, v6("fd00::9"));
}

// Two ports on ::1: A receives on `a_port` and sends to `b_port`, B the other way round.
struct Pair {
  DeviceCounters ca, cb;
  std::unique_ptr<Datapath> a, b;
};

std::unique_ptr<Datapath> open6(uint16_t port, uint16_t dst_port, DeviceCounters& c) {
  UdpPortOptions o;
  o.ipv6 = v6("::1");
  o.port = port;
  o.dst_port = dst_port;
  o.gso = true;
  std::string err;
  auto p = UdpPort::open(o, c.port, &err);
  EXPECT_NE(p, nullptr) << err;
  if (!p) return nullptr;
  auto dp = Datapath::open(std::move(p), DatapathOptions{}, c, &err);
  EXPECT_NE(dp, nullptr) << err;
  return dp;
}

void queue_send(Datapath& dp, const wire::IpAddr& dst, uint32_t psn, uint8_t ecn) {
  transport::TxBuf* b = dp.tx_alloc();
  ASSERT_NE(b, nullptr);
  const std::vector<uint8_t> payload(100, static_cast<uint8_t>(psn));
  b->len = static_cast<uint32_t>(
      test::build_packet(b->data, wire::Opcode::kRcSendOnly, 0x11, psn, payload));
  b->dst_ip = dst;
  b->src_port = 0xc321;
  b->ecn = ecn;
  dp.tx_commit(b);
}

std::vector<RxPacket> receive(Datapath& dp, size_t want) {
  std::vector<RxPacket> out;
  const int fd = static_cast<UdpPort&>(dp.port()).rx_fd();
  while (out.size() < want) {
    auto batch = dp.rx_burst(monotonic_now());
    if (batch.empty()) {
      if (!test::wait_readable(fd, 500)) break;
      continue;
    }
    for (const RxPacket& p : batch) out.push_back(p);  // info only: payloads die next burst
  }
  return out;
}

TEST(Ipv6Port, PacketsOverLoopbackWithExactIcrcAndEcn) {
  DeviceCounters ca, cb;
  auto a = open6(24791, 24792, ca), b = open6(24792, 24791, cb);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->port().caps().exact_icrc);
  EXPECT_FALSE(a->port().caps().multicast);
  EXPECT_EQ(a->port().ip(), v6("::1"));
  EXPECT_NE(a->port().describe().find("[::1]:24791"), std::string::npos) << a->port().describe();
  queue_send(*a, v6("::1"), 100, transport::kEcnEct0);
  queue_send(*a, v6("::1"), 101, transport::kEcnCe);
  EXPECT_EQ(a->tx_flush(monotonic_now()), 2u);
  auto got = receive(*b, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].info.src_ip, v6("::1"));
  EXPECT_EQ(got[0].info.dst_ip, v6("::1"));
  EXPECT_EQ(got[0].info.src_port, 0xc321);
  EXPECT_EQ(got[0].info.ecn, transport::kEcnEct0);  // IPV6_TCLASS both ways
  EXPECT_EQ(got[1].info.ecn, transport::kEcnCe);
  EXPECT_EQ(cb.rcvd_icrc_err.get(), 0u);
  EXPECT_EQ(cb.rcvd_ecn_ce.get(), 1u);
  // A destination of the other family is dropped at commit and counted.
  queue_send(*a, wire::IpAddr(0x7f000001u), 102, transport::kEcnNotEct);
  EXPECT_EQ(ca.port.tx_errors.get(), 1u);
  EXPECT_EQ(a->tx_queued(), 0u);
  // No IPv4 groups on an IPv6 device.
  EXPECT_EQ(a->port().join_group(0xef010203), EOPNOTSUPP);
}

TEST(Ipv6Port, Icmpv6PortUnreachableIsAPortEvent) {
  DeviceCounters ca;
  auto a = open6(24793, 24799, ca);  // nothing listens on 24799
  ASSERT_TRUE(a);
  std::mutex mu;
  std::vector<PortEvent> seen;
  a->port_events().add_listener([&](const PortEvent& e) {
    std::lock_guard<std::mutex> g(mu);
    seen.push_back(e);
  });
  queue_send(*a, v6("::1"), 7, transport::kEcnNotEct);
  EXPECT_EQ(a->tx_flush(monotonic_now()), 1u);
  const int ctl = a->port().control_fd();
  ASSERT_GE(ctl, 0);
  for (int i = 0; i < 100; ++i) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (!seen.empty()) break;
    }
    if (test::wait_readable(ctl, 100)) a->port().on_control();
  }
  std::lock_guard<std::mutex> g(mu);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen[0].port_unreachable());  // ICMPv6 1/4 reported as ICMP 3/3
  EXPECT_EQ(seen[0].dst_ip, v6("::1"));
  EXPECT_EQ(seen[0].dst_port, 24799);
  EXPECT_EQ(seen[0].dest_qp, 0x11u);
  EXPECT_EQ(ca.port.rx_icmp_unreachable.get(), 1u);
}

}  // namespace
}  // namespace uroce
