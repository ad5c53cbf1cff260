// librdmacm's API over an IPv6 uroce device (UROCE_DEVICES=uroce0=::1), in one process: the
// addresses of either family the calls take and give back (sockaddr_in6 in, sockaddr_in6 out),
// a connection whose REQ carries the IP CM header with IP version 6 (Annex A11.2.2), SIDR, the
// refusals of an IPv4 address or an IPv6 multicast group on an IPv6-only device, wildcards and
// EADDRINUSE. ::1 is the one IPv6 loopback address, so both ends are the one device (its CM
// connects to itself, as the kernel's does on one RNIC). The CM thread and the engine are real;
// every wait has a bound.
//
// Built twice: rdma_cm_ipv6_tests with the IPv6 device alone, rdma_cm_dual_stack_tests
// (UROCE_CM_DUAL_STACK) with an IPv4 device beside it (127.0.48.1), for the wildcards' families.
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "rdma_cm_events.h"

namespace {

using uroce::test::expect;
using uroce::test::qp_attr;
using uroce::test::sa;
using uroce::test::Seen;

class Env : public ::testing::Environment {
 public:
#ifdef UROCE_CM_DUAL_STACK
  void SetUp() override {
    setenv("UROCE_DEVICES", "uroce0=::1,uroce1=127.0.48.1", 1);
  }
#else
  void SetUp() override {
    setenv("UROCE_DEVICES", "uroce0=::1", 1);
  }
#endif
};
[[maybe_unused]] const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Env);

sockaddr_in6 sin6_of(const char* ip, uint16_t port) {
  sockaddr_in6 s{};
  s.sin6_family = AF_INET6;
  EXPECT_EQ(inet_pton(AF_INET6, ip, &s.sin6_addr), 1) << ip;
  s.sin6_port = htons(port);
  return s;
}

sockaddr_in sin_of(const char* ip, uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  EXPECT_EQ(inet_pton(AF_INET, ip, &s.sin_addr), 1) << ip;
  s.sin_port = htons(port);
  return s;
}

std::string text_of(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, buf, sizeof buf);
  else if (a->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, buf, sizeof buf);
  return buf;
}

struct Pair : uroce::test::CmPair {
  void listen(const char* ip, uint16_t port, rdma_port_space ps = RDMA_PS_TCP) {
    sockaddr_in6 s = sin6_of(ip, port);
    listen_at(sa(s), ps);
  }
  void resolve(uint16_t port, rdma_port_space ps = RDMA_PS_TCP) {
    sockaddr_in6 dst = sin6_of("::1", port);
    resolve_to(nullptr, sa(dst), ps);
  }
};

TEST(RdmaCmIpv6, ResolvedIdHasIpv6AddressesAndGids) {
  Pair p;
  p.resolve(7101);
  rdma_cm_id* id = p.client;
  ASSERT_NE(id->verbs, nullptr);
  EXPECT_STREQ(ibv_get_device_name(id->verbs->device), "uroce0");
  const sockaddr* src = rdma_get_local_addr(id);
  const sockaddr* dst = rdma_get_peer_addr(id);
  ASSERT_EQ(src->sa_family, AF_INET6);
  ASSERT_EQ(dst->sa_family, AF_INET6);
  EXPECT_EQ(text_of(src), "::1");
  EXPECT_EQ(text_of(dst), "::1");
  EXPECT_NE(rdma_get_src_port(id), 0);  // an ephemeral port, from sin6_port
  EXPECT_EQ(rdma_get_src_port(id), reinterpret_cast<const sockaddr_in6*>(src)->sin6_port);
  EXPECT_EQ(ntohs(rdma_get_dst_port(id)), 7101);
  ASSERT_NE(id->route.path_rec, nullptr);
  // The GIDs are the IPv6 addresses themselves, not IPv4-mapped ones.
  const uint8_t loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(std::memcmp(id->route.path_rec->dgid.raw, loopback, 16), 0);
  EXPECT_EQ(std::memcmp(id->route.path_rec->sgid.raw, loopback, 16), 0);
  EXPECT_EQ(std::memcmp(id->route.addr.addr.ibaddr.dgid.raw, loopback, 16), 0);
}

// A whole connection: the REQ's IP CM header (IP version 6, 16-byte addresses) is what the
// passive side reads its peer's address and port from, and it leaves 56 bytes of private data.
TEST(RdmaCmIpv6, ConnectAcceptSendDisconnect) {
  Pair p;
  p.listen("::1", 7102);
  p.resolve(7102);
  ibv_qp_init_attr a = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  std::vector<uint8_t> too_long(57, 1);
  rdma_conn_param cp{};
  cp.private_data = too_long.data();
  cp.private_data_len = 57;  // 36 + 57 > 92
  EXPECT_EQ(rdma_connect(p.client, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
  const char hello[] = "hello over IPv6";
  cp.private_data = hello;
  cp.private_data_len = sizeof hello;
  ASSERT_EQ(rdma_connect(p.client, &cp), 0);

  Seen req = expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(req.id, nullptr);
  p.child = req.id;
  ASSERT_EQ(req.pd.size(), 56u);
  EXPECT_EQ(std::memcmp(req.pd.data(), hello, sizeof hello), 0);
  const sockaddr* peer = rdma_get_peer_addr(p.child);
  const sockaddr* local = rdma_get_local_addr(p.child);
  ASSERT_EQ(peer->sa_family, AF_INET6);
  ASSERT_EQ(local->sa_family, AF_INET6);
  EXPECT_EQ(text_of(peer), "::1");
  EXPECT_EQ(rdma_get_dst_port(p.child), rdma_get_src_port(p.client));  // the header's port
  EXPECT_EQ(ntohs(rdma_get_src_port(p.child)), 7102);

  ibv_qp_init_attr a2 = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.child, nullptr, &a2), 0);
  std::vector<char> rbuf(64), sbuf(64);
  ibv_mr* rmr = rdma_reg_msgs(p.child, rbuf.data(), rbuf.size());
  ASSERT_NE(rmr, nullptr);
  ASSERT_EQ(rdma_post_recv(p.child, nullptr, rbuf.data(), rbuf.size(), rmr), 0);
  ASSERT_EQ(rdma_accept(p.child, nullptr), 0);
  expect(p.cch, RDMA_CM_EVENT_ESTABLISHED);
  expect(p.sch, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_RTS);

  p.send_and_check("data over an IPv6 connection", rbuf, rmr);
  p.disconnect();
}

// UD over IPv6: the SIDR REQ carries the version 6 header; the answer's AH is the IPv6 GID.
TEST(RdmaCmIpv6, UdIdsResolveTheRemoteQpWithSidr) {
  Pair p;
  p.listen("::1", 7103, RDMA_PS_UDP);
  p.resolve(7103, RDMA_PS_UDP);
  ibv_qp_init_attr a = qp_attr(IBV_QPT_UD);
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  uroce::test::UdExchange x;
  ASSERT_NO_FATAL_FAILURE(p.ud_exchange("sidr6", &x));
  EXPECT_EQ(rdma_get_peer_addr(p.child)->sa_family, AF_INET6);
  EXPECT_EQ(x.est.ud.ah_attr.grh.dgid.raw[10], 0);  // not IPv4-mapped
  EXPECT_EQ(x.est.ud.ah_attr.grh.dgid.raw[15], 1);
  EXPECT_EQ(x.rbuf[0] >> 4, 6);  // the GRH area holds the IPv6 header

  // IPv6 multicast is refused honestly; so is an IPv4 group on this IPv6 device.
  sockaddr_in6 g6 = sin6_of("ff0e::1:2", 0);
  EXPECT_EQ(rdma_join_multicast(p.client, sa(g6), nullptr), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  sockaddr_in g4 = sin_of("239.1.2.3", 0);
  EXPECT_EQ(rdma_join_multicast(p.client, sa(g4), nullptr), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

#ifndef UROCE_CM_DUAL_STACK
// What an IPv6-only list of devices refuses, with the kernel CM's errnos.
TEST(RdmaCmIpv6, Ipv4OnAnIpv6OnlyDeviceListIsRefused) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  // An IPv4 address no device has: EADDRNOTAVAIL (rdma_translate_ip).
  sockaddr_in v4 = sin_of("192.0.2.7", 7104);
  EXPECT_EQ(rdma_bind_addr(id, sa(v4)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  // An IPv4 destination: no device of that family (cma_acquire_dev_by_src_ip: ENODEV).
  sockaddr_in dst4 = sin_of("127.0.0.1", 7104);
  EXPECT_EQ(rdma_resolve_addr(id, nullptr, sa(dst4), 1000), -1);
  EXPECT_EQ(errno, ENODEV);
  rdma_destroy_id(id);
  // A source of another family than the destination: EINVAL.
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in6 src6 = sin6_of("::1", 0);
  EXPECT_EQ(rdma_resolve_addr(id, sa(src6), sa(dst4), 1000), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_destroy_id(id);
  // An IPv4 wildcard listener has no device to listen on.
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in any4 = sin_of("0.0.0.0", 7104);
  ASSERT_EQ(rdma_bind_addr(id, sa(any4)), 0);
  EXPECT_EQ(rdma_listen(id, 1), -1);
  EXPECT_EQ(errno, ENODEV);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
}
#endif

// [::] listens on the IPv6 device (dual-stack: every device); ports collide as the kernel's
// cma_check_port says, across families too.
TEST(RdmaCmIpv6, WildcardListenerAndPortsInUse) {
  Pair p;
  p.listen("::", 7105);
  EXPECT_EQ(p.listener->verbs, nullptr);
  EXPECT_EQ(rdma_get_local_addr(p.listener)->sa_family, AF_INET6);
  p.resolve(7105);
  ibv_qp_init_attr a = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  ASSERT_EQ(rdma_connect(p.client, nullptr), 0);
  Seen req = expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  p.child = req.id;
  ASSERT_NE(p.child, nullptr);
  EXPECT_STREQ(ibv_get_device_name(p.child->verbs->device), "uroce0");
  EXPECT_EQ(text_of(rdma_get_local_addr(p.child)), "::1");  // the device's, not ::
  ASSERT_EQ(rdma_reject(p.child, nullptr, 0), 0);
  expect(p.cch, RDMA_CM_EVENT_REJECTED, 28);

  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id *a1, *a2, *a3, *a4;
  ASSERT_EQ(rdma_create_id(ch, &a1, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_create_id(ch, &a2, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_create_id(ch, &a3, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_create_id(ch, &a4, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in6 one = sin6_of("::1", 7105);
  EXPECT_EQ(rdma_bind_addr(a1, sa(one)), -1);  // [::]:7105 holds it
  EXPECT_EQ(errno, EADDRINUSE);
  sockaddr_in6 other = sin6_of("::1", 7106);
  ASSERT_EQ(rdma_bind_addr(a1, sa(other)), 0);  // another port: a second server
  ASSERT_EQ(rdma_listen(a1, 1), 0);
  EXPECT_EQ(rdma_bind_addr(a2, sa(other)), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  // 0.0.0.0 and an AFONLY [::] share a port; a dual-stack [::] does not.
  sockaddr_in any4 = sin_of("0.0.0.0", 7107);
  ASSERT_EQ(rdma_bind_addr(a2, sa(any4)), 0);
  int one_only = 1;
  ASSERT_EQ(rdma_set_option(a3, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one_only, sizeof one_only),
            0);
  sockaddr_in6 any6 = sin6_of("::", 7107);
  EXPECT_EQ(rdma_bind_addr(a3, sa(any6)), 0);
  EXPECT_EQ(rdma_bind_addr(a4, sa(any6)), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  for (rdma_cm_id* id : {a1, a2, a3, a4}) rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
}

TEST(RdmaCmIpv6, GetaddrinfoGivesSockaddrIn6) {
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("::1", "7108", &hints, &res), 0);
  ASSERT_NE(res, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET6);
  ASSERT_NE(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_src_addr->sa_family, AF_INET6);
  EXPECT_EQ(res->ai_src_len, sizeof(sockaddr_in6));
  EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in6*>(res->ai_src_addr)->sin6_port), 7108);
  rdma_freeaddrinfo(res);
  // An active lookup with the family open: the answer of the devices' family.
  hints.ai_flags = 0;
  ASSERT_EQ(rdma_getaddrinfo("::1", "7108", &hints, &res), 0);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  EXPECT_EQ(res->ai_dst_addr->sa_family, AF_INET6);
  rdma_freeaddrinfo(res);
}

#ifdef UROCE_CM_DUAL_STACK
// A client id on `ch` connected (REQ sent) to `dst`, from the device the route picks.
rdma_cm_id* connect_to(rdma_event_channel* ch, sockaddr* dst) {
  rdma_cm_id* id = nullptr;
  EXPECT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(rdma_resolve_addr(id, nullptr, dst, 2000), 0);
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(rdma_resolve_route(id, 2000), 0);
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr a = qp_attr();
  EXPECT_EQ(rdma_create_qp(id, nullptr, &a), 0);
  EXPECT_EQ(rdma_connect(id, nullptr), 0);
  return id;
}

void drop(rdma_cm_id* id) {
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

// [::] is dual-stack (the kernel's default, net.ipv6.bindv6only 0): it listens on both devices
// and each new id has its request's family, on the device the request came to.
TEST(RdmaCmDualStack, Ipv6WildcardTakesBothFamilies) {
  Pair p;
  p.listen("::", 7110);
  sockaddr_in6 to6 = sin6_of("::1", 7110);
  sockaddr_in to4 = sin_of("127.0.48.1", 7110);
  for (sockaddr* to : {sa(to6), sa(to4)}) {
    rdma_cm_id* c = connect_to(p.cch, to);
    Seen req = expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(req.id, nullptr);
    EXPECT_EQ(rdma_get_local_addr(req.id)->sa_family, to->sa_family);
    EXPECT_EQ(rdma_get_peer_addr(req.id)->sa_family, to->sa_family);
    EXPECT_EQ(text_of(rdma_get_local_addr(req.id)), text_of(to));
    EXPECT_STREQ(ibv_get_device_name(req.id->verbs->device),
                 to->sa_family == AF_INET6 ? "uroce0" : "uroce1");
    ASSERT_EQ(rdma_reject(req.id, nullptr, 0), 0);
    expect(p.cch, RDMA_CM_EVENT_REJECTED, 28);  // the listener's consumer said no
    rdma_destroy_id(req.id);
    drop(c);
  }
}

// 0.0.0.0 takes IPv4 only, an AFONLY [::] IPv6 only, and the two share a port. A wildcard
// listens on the devices of its family only, so a request of the other family finds no listener
// on its device: REJ reason 8 (the kernel's CM, whose listeners cover every device, fails it in
// cma_match_private_data instead: reason 28).
TEST(RdmaCmDualStack, EachFamilyOnlyWildcards) {
  rdma_event_channel* sch = rdma_create_event_channel();
  rdma_event_channel* cch = rdma_create_event_channel();
  rdma_cm_id *l4, *l6;
  ASSERT_EQ(rdma_create_id(sch, &l6, nullptr, RDMA_PS_TCP), 0);
  int on = 1;
  ASSERT_EQ(rdma_set_option(l6, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &on, sizeof on), 0);
  sockaddr_in6 any6 = sin6_of("::", 7111);
  ASSERT_EQ(rdma_bind_addr(l6, sa(any6)), 0);
  ASSERT_EQ(rdma_listen(l6, 2), 0);
  sockaddr_in to4 = sin_of("127.0.48.1", 7111);
  rdma_cm_id* c = connect_to(cch, sa(to4));
  expect(cch, RDMA_CM_EVENT_REJECTED, 8);  // no IPv4 listener on 7111
  drop(c);

  ASSERT_EQ(rdma_create_id(sch, &l4, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in any4 = sin_of("0.0.0.0", 7111);
  ASSERT_EQ(rdma_bind_addr(l4, sa(any4)), 0);  // shares 7111 with the AFONLY [::]
  ASSERT_EQ(rdma_listen(l4, 2), 0);
  sockaddr_in6 to6 = sin6_of("::1", 7111);
  for (sockaddr* to : {sa(to4), sa(to6)}) {
    c = connect_to(cch, to);
    Seen req = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(req.id, nullptr);
    EXPECT_EQ(rdma_get_local_addr(req.id)->sa_family, to->sa_family);
    ASSERT_EQ(rdma_reject(req.id, nullptr, 0), 0);
    expect(cch, RDMA_CM_EVENT_REJECTED, 28);
    rdma_destroy_id(req.id);
    drop(c);
  }
  rdma_destroy_id(l4);
  rdma_destroy_id(l6);
  rdma_destroy_event_channel(sch);
  rdma_destroy_event_channel(cch);
}
#endif

}  // namespace
