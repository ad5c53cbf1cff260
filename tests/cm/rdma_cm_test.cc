// librdmacm's API as liburoce serves it (src/cm/rdma_cm_*.cc), driven in one process over two uroce
// devices: event channels, the event sequence and statuses of a connection, private data, rejects,
// synchronous endpoints, UD ids with SIDR, options and bad input. The CM thread and the engines
// are real; every wait has a bound and nothing is asserted about how long anything took.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/stats_shm.h"
#include "rdma_cm_events.h"
#include "stderr_capture.h"

namespace {

constexpr const char* kDevices = "uroce0=127.0.43.1,uroce1=127.0.43.2";
constexpr uint32_t kServerIp = 0x7f002b01;  // 127.0.43.1
constexpr uint32_t kClientIp = 0x7f002b02;  // 127.0.43.2

class Env : public ::testing::Environment {
 public:
  void SetUp() override { setenv("UROCE_DEVICES", kDevices, 1); }
};
[[maybe_unused]] const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Env);

sockaddr_in sin_of(uint32_t ip, uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(ip);
  s.sin_port = htons(port);
  return s;
}

using uroce::test::expect;
using uroce::test::next;
using uroce::test::qp_attr;
using uroce::test::sa;
using uroce::test::Seen;

// A listener on the server device and a client id resolved to it, each on its own channel.
struct Pair : uroce::test::CmPair {
  void listen(uint16_t port, rdma_port_space ps = RDMA_PS_TCP) {
    sockaddr_in s = sin_of(kServerIp, port);
    listen_at(sa(s), ps);
  }
  void resolve(uint16_t port, rdma_port_space ps = RDMA_PS_TCP) {
    sockaddr_in src = sin_of(kClientIp, 0), dst = sin_of(kServerIp, port);
    resolve_to(sa(src), sa(dst), ps);
  }
};

TEST(RdmaCm, EventChannelIsAPollableFdHonouringONonblock) {
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  int fl = fcntl(ch->fd, F_GETFL);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
  rdma_cm_event* e = nullptr;
  EXPECT_EQ(rdma_get_cm_event(ch, &e), -1);
  EXPECT_EQ(errno, EAGAIN);
  pollfd p{ch->fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
  rdma_cm_id* id;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst = sin_of(kServerIp, 1);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 1000), 0);
  EXPECT_EQ(poll(&p, 1, 5000), 1);  // readable once the event is queued
  ASSERT_EQ(rdma_get_cm_event(ch, &e), 0);
  EXPECT_EQ(e->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(e->id, id);
  rdma_ack_cm_event(e);
  EXPECT_EQ(rdma_get_cm_event(ch, &e), -1);
  EXPECT_EQ(errno, EAGAIN);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
}

// rping's CM thread calls rdma_get_cm_event once more after the main thread destroyed the
// channel: as with librdmacm's read() of a closed channel it sleeps until the process ends (here:
// until cancelled), where it used to fail with EBADF and make rping exit 255.
TEST(RdmaCm, GetEventOnADestroyedChannelSleepsLikeLibrdmacmsRead) {
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_destroy_event_channel(ch);
  static std::atomic<int> returned{0};
  pthread_t t;
  auto body = [](void* arg) -> void* {
    rdma_cm_event* e = nullptr;
    rdma_get_cm_event(static_cast<rdma_event_channel*>(arg), &e);
    returned = 1;
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&t, nullptr, body, ch), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(returned.load(), 0);
  pthread_cancel(t);
  void* res = nullptr;
  ASSERT_EQ(pthread_join(t, &res), 0);
  EXPECT_EQ(res, PTHREAD_CANCELED);
  EXPECT_EQ(returned.load(), 0);

  // A non-blocking channel's late read fails, as read() of a closed fd does.
  ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  rdma_destroy_event_channel(ch);
  rdma_cm_event* e = nullptr;
  EXPECT_EQ(rdma_get_cm_event(ch, &e), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(RdmaCm, ResolvedIdNamesItsDeviceAndRoute) {
  Pair p;
  p.resolve(7001);
  rdma_cm_id* id = p.client;
  ASSERT_NE(id->verbs, nullptr);
  EXPECT_STREQ(ibv_get_device_name(id->verbs->device), "uroce1");  // the source's device
  // The device's PD, as librdmacm gives it (UCX creates a QP on it before connecting).
  ASSERT_NE(id->pd, nullptr);
  EXPECT_EQ(id->pd->context, id->verbs);
  EXPECT_EQ(id->port_num, 1);
  EXPECT_EQ(id->ps, RDMA_PS_TCP);
  EXPECT_EQ(id->qp_type, IBV_QPT_RC);
  auto* src = reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(id));
  auto* dst = reinterpret_cast<sockaddr_in*>(rdma_get_peer_addr(id));
  EXPECT_EQ(ntohl(src->sin_addr.s_addr), kClientIp);
  EXPECT_NE(rdma_get_src_port(id), 0);  // an ephemeral port was bound
  EXPECT_EQ(ntohl(dst->sin_addr.s_addr), kServerIp);
  EXPECT_EQ(ntohs(rdma_get_dst_port(id)), 7001);
  ASSERT_EQ(id->route.num_paths, 1);
  ASSERT_NE(id->route.path_rec, nullptr);
  // RoCEv2 GIDs: IPv4-mapped addresses.
  EXPECT_EQ(id->route.path_rec->dgid.raw[10], 0xff);
  EXPECT_EQ(id->route.path_rec->dgid.raw[15], 1);
  EXPECT_EQ(id->route.path_rec->sgid.raw[15], 2);
}

TEST(RdmaCm, ConnectAcceptSendDisconnect) {
  Pair p;
  p.listen(7002);
  p.resolve(7002);
  ibv_qp_init_attr a = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  ASSERT_NE(p.client->qp, nullptr);
  ASSERT_NE(p.client->send_cq, nullptr);  // librdmacm creates the CQs left NULL
  ASSERT_NE(p.client->recv_cq_channel, nullptr);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_INIT);

  const char hello[] = "hello from the client";
  rdma_conn_param cp{};
  cp.private_data = hello;
  cp.private_data_len = sizeof hello;
  cp.responder_resources = 2;
  cp.initiator_depth = 3;
  cp.retry_count = 5;
  cp.rnr_retry_count = 6;
  ASSERT_EQ(rdma_connect(p.client, &cp), 0);

  Seen req = expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(req.id, nullptr);
  p.child = req.id;
  EXPECT_EQ(req.listen_id, p.listener);
  EXPECT_EQ(req.id->channel, p.sch);  // the new id shares the listener's channel
  EXPECT_EQ(req.id->context, p.listener->context);
  ASSERT_GE(req.pd.size(), sizeof hello);  // the whole field after the A11 header (56 bytes)
  EXPECT_EQ(req.pd.size(), 56u);
  EXPECT_EQ(std::memcmp(req.pd.data(), hello, sizeof hello), 0);
  // Seen from the passive side: it may read as deep as the client's initiator depth.
  EXPECT_EQ(req.conn.responder_resources, 3);
  EXPECT_EQ(req.conn.initiator_depth, 2);
  EXPECT_EQ(req.conn.retry_count, 5);
  EXPECT_EQ(req.conn.rnr_retry_count, 6);
  EXPECT_EQ(req.conn.qp_num, p.client->qp->qp_num);
  auto* peer = reinterpret_cast<sockaddr_in*>(rdma_get_peer_addr(p.child));
  EXPECT_EQ(ntohl(peer->sin_addr.s_addr), kClientIp);
  EXPECT_EQ(peer->sin_port, rdma_get_src_port(p.client));
  EXPECT_STREQ(ibv_get_device_name(p.child->verbs->device), "uroce0");
  ASSERT_NE(p.child->pd, nullptr);
  EXPECT_EQ(p.child->pd->context, p.child->verbs);

  ibv_qp_init_attr sa2 = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.child, nullptr, &sa2), 0);
  // A receive for the client's message, posted before the QP can see it.
  std::vector<char> rbuf(64), sbuf(64);
  ibv_mr* rmr = rdma_reg_msgs(p.child, rbuf.data(), rbuf.size());
  ASSERT_NE(rmr, nullptr);
  ASSERT_EQ(rdma_post_recv(p.child, nullptr, rbuf.data(), rbuf.size(), rmr), 0);
  const char welcome[] = "welcome";
  rdma_conn_param ap{};
  ap.private_data = welcome;
  ap.private_data_len = sizeof welcome;
  ap.responder_resources = 3;
  ap.initiator_depth = 2;
  ap.rnr_retry_count = 7;
  ASSERT_EQ(rdma_accept(p.child, &ap), 0);

  Seen est = expect(p.cch, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_GE(est.pd.size(), sizeof welcome);
  EXPECT_EQ(std::memcmp(est.pd.data(), welcome, sizeof welcome), 0);
  EXPECT_EQ(est.conn.qp_num, p.child->qp->qp_num);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_RTS);
  expect(p.sch, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(p.child->qp->state, IBV_QPS_RTS);
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  ASSERT_EQ(
      ibv_query_qp(p.client->qp, &qa, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &qi), 0);
  EXPECT_EQ(qa.max_rd_atomic, 3);       // what the server's REP allowed
  EXPECT_EQ(qa.max_dest_rd_atomic, 2);  // what the server may read from us

  // The QPs are connected to each other.
  p.send_and_check("data over the connection", rbuf, rmr);

  // The client disconnects; both sides hear it, then both time-wait out.
  p.disconnect();
  expect(p.cch, RDMA_CM_EVENT_TIMEWAIT_EXIT);
  expect(p.sch, RDMA_CM_EVENT_TIMEWAIT_EXIT);
}

TEST(RdmaCm, RejectCarriesTheConsumerReasonAndPrivateData) {
  Pair p;
  p.listen(7003);
  p.resolve(7003);
  ibv_qp_init_attr a = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  ASSERT_EQ(rdma_connect(p.client, nullptr), 0);
  Seen req = expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  p.child = req.id;
  const char why[] = "go away";
  ASSERT_EQ(rdma_reject(p.child, why, sizeof why), 0);
  Seen rej = expect(p.cch, RDMA_CM_EVENT_REJECTED, 28);  // IBTA: consumer reject
  ASSERT_GE(rej.pd.size(), sizeof why);
  EXPECT_EQ(std::memcmp(rej.pd.data(), why, sizeof why), 0);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_ERR);
}

TEST(RdmaCm, NobodyListeningIsRejectedWithInvalidServiceId) {
  Pair p;
  p.listen(7014);   // the server device's CM runs (each test may run in a process of its own)
  p.resolve(7004);  // but nothing listens on 7004
  ibv_qp_init_attr a = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  ASSERT_EQ(rdma_connect(p.client, nullptr), 0);
  expect(p.cch, RDMA_CM_EVENT_REJECTED, 8);
}

// A program may tell its peer the port between rdma_bind_addr and rdma_listen (qperf does): the
// REQ that comes in between waits for the listen instead of being rejected — the kernel's CM
// would reject it, but there the two calls are microseconds apart — and a bound id destroyed
// without listening answers it as nobody listening does.
TEST(RdmaCm, ARequestBetweenBindAndListenWaitsForTheListen) {
  Pair p;
  ASSERT_EQ(rdma_create_id(p.sch, &p.listener, &p, RDMA_PS_TCP), 0);
  sockaddr_in s = sin_of(kServerIp, 7020);
  ASSERT_EQ(rdma_bind_addr(p.listener, sa(s)), 0);
  p.resolve(7020);
  ibv_qp_init_attr a = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  ASSERT_EQ(rdma_connect(p.client, nullptr), 0);
  // Before the hold, REJECTED came here within a millisecond.
  EXPECT_EQ(next(p.cch, 200), nullptr) << "the REQ was answered before the listen";
  ASSERT_EQ(rdma_listen(p.listener, 4), 0);
  Seen req = expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(req.id, nullptr);
  p.child = req.id;
  ASSERT_EQ(rdma_create_qp(p.child, nullptr, &a), 0);
  ASSERT_EQ(rdma_accept(p.child, nullptr), 0);
  expect(p.cch, RDMA_CM_EVENT_ESTABLISHED);
  expect(p.sch, RDMA_CM_EVENT_ESTABLISHED);
}

TEST(RdmaCm, ARequestForABoundIdDestroyedWithoutListeningIsRejected) {
  Pair p;
  ASSERT_EQ(rdma_create_id(p.sch, &p.listener, &p, RDMA_PS_TCP), 0);
  sockaddr_in s = sin_of(kServerIp, 7021);
  ASSERT_EQ(rdma_bind_addr(p.listener, sa(s)), 0);
  p.resolve(7021);
  ibv_qp_init_attr a = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  ASSERT_EQ(rdma_connect(p.client, nullptr), 0);
  EXPECT_EQ(next(p.cch, 100), nullptr);
  ASSERT_EQ(rdma_destroy_id(p.listener), 0);
  p.listener = nullptr;
  expect(p.cch, RDMA_CM_EVENT_REJECTED, 8);  // invalid service ID, as with nobody listening
}

// A synchronous endpoint made from `res` whose rdma_connect fails with `err`.
void expect_sync_connect_fails(rdma_addrinfo* res, int err) {
  ibv_qp_init_attr a = qp_attr();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &a), 0);
  EXPECT_EQ(rdma_connect(id, nullptr), -1);
  EXPECT_EQ(errno, err);
  rdma_destroy_ep(id);
}

// The packets a device of this process has sent, from its published counters (`uroce stats`:
// live, in shared memory); nullopt when publishing is off (UROCE_PUBLISH=0).
std::optional<uint64_t> sent_pkts(const char* device) {
  std::string err;
  auto snap = uroce::stats_shm::read_file(
      std::string(uroce::stats_shm::kShmDir) + uroce::stats_shm::shm_name(getpid(), device), &err);
  if (!snap) return std::nullopt;
  for (const auto& [name, v] : snap->counters)
    if (name == "sent_pkts") return v;
  return std::nullopt;
}

// A peer address where nothing listens on UDP 4791 (127.0.43.9: a local address no device
// has) answers the REQ with ICMP port unreachable: the connection fails at once with
// UNREACHABLE and -ECONNREFUSED — out of retries it would be -ETIMEDOUT, after the REQ's 15
// retransmissions — and a synchronous connect with ECONNREFUSED.
TEST(RdmaCm, NoRoceEndpointAtTheAddressIsUnreachableAtOnce) {
  constexpr uint32_t kNobody = 0x7f002b09;  // 127.0.43.9
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in src = sin_of(kClientIp, 0), dst = sin_of(kNobody, 7015);
  ASSERT_EQ(rdma_resolve_addr(id, sa(src), sa(dst), 2000), 0);
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr a = qp_attr();
  ASSERT_EQ(rdma_create_qp(id, nullptr, &a), 0);
  const std::optional<uint64_t> before = sent_pkts("uroce1");
  std::string why;
  if (uroce::stats_shm::publishing_enabled(&why)) {
    ASSERT_TRUE(before);
  }
  ASSERT_EQ(rdma_connect(id, nullptr), 0);
  expect(ch, RDMA_CM_EVENT_UNREACHABLE, -ECONNREFUSED);
  EXPECT_EQ(id->qp->state, IBV_QPS_ERR);
  if (const std::optional<uint64_t> after = sent_pkts("uroce1"); before && after) {
    EXPECT_LT(*after - *before, 16u) << "the REQ was sent its full count (1 + 15 retries)";
  }
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);

  // Synchronous: rdma_connect returns the error.
  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_src_addr = sa(src);
  hints.ai_src_len = sizeof src;
  ASSERT_EQ(rdma_getaddrinfo("127.0.43.9", "7015", &hints, &res), 0);
  expect_sync_connect_fails(res, ECONNREFUSED);
  rdma_freeaddrinfo(res);
}

TEST(RdmaCm, IdWithoutQpGetsConnectResponseAndEstablishes) {
  Pair p;
  p.listen(7005);
  p.resolve(7005);
  rdma_conn_param cp{};
  cp.qp_num = 0x1234;  // the application's own QP
  ASSERT_EQ(rdma_connect(p.client, &cp), 0);
  Seen req = expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  p.child = req.id;
  EXPECT_EQ(req.conn.qp_num, 0x1234u);
  // The passive application moves its own QP to RTR and RTS before it accepts (pyverbs'
  // external-QP test does): the PSN it is told to receive first must be the one the REP
  // announces, which the active side is then told to send first.
  ibv_qp_attr srtr{}, srts{};
  int mask = 0;
  srtr.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(rdma_init_qp_attr(p.child, &srtr, &mask), 0);
  EXPECT_EQ(srtr.dest_qp_num, 0x1234u);
  srts.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(rdma_init_qp_attr(p.child, &srts, &mask), 0);
  rdma_conn_param ap{};
  ap.qp_num = 0x5678;
  ASSERT_EQ(rdma_accept(p.child, &ap), 0);
  Seen resp = expect(p.cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
  EXPECT_EQ(resp.conn.qp_num, 0x5678u);
  ibv_qp_attr crtr{}, crts{};
  crtr.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(rdma_init_qp_attr(p.client, &crtr, &mask), 0);
  crts.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(rdma_init_qp_attr(p.client, &crts, &mask), 0);
  EXPECT_EQ(crtr.dest_qp_num, 0x5678u);
  EXPECT_EQ(crts.sq_psn, srtr.rq_psn);
  EXPECT_EQ(srts.sq_psn, crtr.rq_psn);
  ASSERT_EQ(rdma_establish(p.client), 0);  // sends the RTU
  expect(p.sch, RDMA_CM_EVENT_ESTABLISHED);
}

// Without node and service, librdmacm takes the addresses from the hints (libfabric's verbs
// provider asks so for a source address alone); with nothing at all it is EINVAL.
TEST(RdmaCm, GetaddrinfoFromHintsAlone) {
  rdma_addrinfo* res = nullptr;
  EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), -1);
  EXPECT_EQ(errno, EINVAL);
  sockaddr_in src = sin_of(kServerIp, 0);
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_src_addr = sa(src);
  hints.ai_src_len = sizeof src;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0);
  ASSERT_NE(res, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET);
  EXPECT_EQ(res->ai_flags, RAI_PASSIVE);
  ASSERT_EQ(res->ai_src_len, sizeof src);
  EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof src), 0);
  EXPECT_NE(res->ai_src_addr, hints.ai_src_addr);  // a copy rdma_freeaddrinfo may free
  EXPECT_EQ(res->ai_dst_addr, nullptr);
  rdma_freeaddrinfo(res);
}

TEST(RdmaCm, SynchronousEndpoints) {
  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo("127.0.43.1", "7006", &hints, &res), 0);
  ASSERT_NE(res, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  ASSERT_NE(res->ai_src_addr, nullptr);
  ibv_qp_init_attr a = qp_attr();
  rdma_cm_id* listen_id = nullptr;
  ASSERT_EQ(rdma_create_ep(&listen_id, res, nullptr, &a), 0);
  rdma_freeaddrinfo(res);
  ASSERT_EQ(rdma_listen(listen_id, 1), 0);

  std::thread server([&] {
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_get_request(listen_id, &id), 0);
    ASSERT_NE(id->qp, nullptr);              // made from the endpoint's QP attributes
    EXPECT_EQ(rdma_accept(id, nullptr), 0);  // returns once established
    EXPECT_EQ(id->qp->state, IBV_QPS_RTS);
    rdma_cm_event* e = nullptr;
    EXPECT_EQ(rdma_get_cm_event(id->channel, &e), 0);  // the client's disconnect
    if (e) {
      EXPECT_EQ(e->event, RDMA_CM_EVENT_DISCONNECTED);
      rdma_ack_cm_event(e);
    }
    rdma_disconnect(id);
    rdma_destroy_ep(id);
  });

  hints = {};
  hints.ai_port_space = RDMA_PS_TCP;
  sockaddr_in src = sin_of(kClientIp, 0);
  hints.ai_src_addr = sa(src);
  hints.ai_src_len = sizeof src;
  ASSERT_EQ(rdma_getaddrinfo("127.0.43.1", "7006", &hints, &res), 0);
  rdma_cm_id* id = nullptr;
  a = qp_attr();
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &a), 0);  // resolves address and route, makes a QP
  ASSERT_NE(id->qp, nullptr);
  EXPECT_EQ(rdma_connect(id, nullptr), 0);  // returns once established
  EXPECT_EQ(id->qp->state, IBV_QPS_RTS);
  EXPECT_EQ(rdma_disconnect(id), 0);
  server.join();
  rdma_destroy_ep(id);

  // A synchronous connect to a port nobody serves fails with ECONNREFUSED.
  res->ai_dst_addr->sa_family = AF_INET;
  reinterpret_cast<sockaddr_in*>(res->ai_dst_addr)->sin_port = htons(7099);
  expect_sync_connect_fails(res, ECONNREFUSED);
  rdma_freeaddrinfo(res);
  rdma_destroy_ep(listen_id);
}

TEST(RdmaCm, UdIdsResolveTheRemoteQpWithSidr) {
  Pair p;
  p.listen(7007, RDMA_PS_UDP);
  p.resolve(7007, RDMA_PS_UDP);
  EXPECT_EQ(p.client->qp_type, IBV_QPT_UD);
  ibv_qp_init_attr a = qp_attr(IBV_QPT_UD);
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_RTS);  // UD QPs are ready at once
  uroce::test::UdExchange x;
  ASSERT_NO_FATAL_FAILURE(p.ud_exchange("sidr", &x));
  EXPECT_EQ(x.est.ud.qkey, static_cast<uint32_t>(RDMA_UDP_QKEY));
  EXPECT_EQ(x.est.ud.ah_attr.is_global, 1);
  EXPECT_EQ(x.est.ud.ah_attr.grh.dgid.raw[15], 1);
  EXPECT_EQ(x.wc.src_qp, p.client->qp->qp_num);
}

TEST(RdmaCm, UdToNobodyIsUnreachable) {
  Pair p;
  p.listen(7015, RDMA_PS_UDP);  // the server device's CM runs, but not for port 7008
  p.resolve(7008, RDMA_PS_UDP);
  ibv_qp_init_attr a = qp_attr(IBV_QPT_UD);
  ASSERT_EQ(rdma_create_qp(p.client, nullptr, &a), 0);
  ASSERT_EQ(rdma_connect(p.client, nullptr), 0);
  expect(p.cch, RDMA_CM_EVENT_UNREACHABLE, 1);  // SIDR REP status 1: service ID not supported
}

TEST(RdmaCm, WildcardListenerServesEveryDevice) {
  Pair p;
  ASSERT_EQ(rdma_create_id(p.sch, &p.listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in any = sin_of(INADDR_ANY, 7009);
  ASSERT_EQ(rdma_bind_addr(p.listener, sa(any)), 0);
  EXPECT_EQ(p.listener->verbs, nullptr);  // not bound to a device
  ASSERT_EQ(rdma_listen(p.listener, 1), 0);
  // A client on the server device itself, and one on the other device.
  for (uint32_t src_ip : {kServerIp, kClientIp}) {
    rdma_cm_id* c;
    ASSERT_EQ(rdma_create_id(p.cch, &c, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in src = sin_of(src_ip, 0),
                dst = sin_of(src_ip == kServerIp ? kClientIp : kServerIp, 7009);
    ASSERT_EQ(rdma_resolve_addr(c, sa(src), sa(dst), 2000), 0);
    expect(p.cch, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_EQ(rdma_resolve_route(c, 2000), 0);
    expect(p.cch, RDMA_CM_EVENT_ROUTE_RESOLVED);
    rdma_conn_param cp{};
    cp.qp_num = 0x42;
    ASSERT_EQ(rdma_connect(c, &cp), 0);
    Seen req = expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(req.id, nullptr);
    EXPECT_STREQ(ibv_get_device_name(req.id->verbs->device),
                 src_ip == kServerIp ? "uroce1" : "uroce0");
    rdma_reject(req.id, nullptr, 0);
    expect(p.cch, RDMA_CM_EVENT_REJECTED, 28);
    rdma_destroy_id(req.id);
    rdma_destroy_id(c);
  }
}

// The kernel's CM counts a loopback address as "any" (cma_any_addr): bound to 127.0.0.1 (which
// no device here has), an id gets no device, keeps its address, and listens on every device.
TEST(RdmaCm, LoopbackAddressNoDeviceHasBindsLikeTheWildcard) {
  Pair p;
  ASSERT_EQ(rdma_create_id(p.sch, &p.listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in lo = sin_of(0x7f000001, 7011);
  ASSERT_EQ(rdma_bind_addr(p.listener, sa(lo)), 0);
  EXPECT_EQ(p.listener->verbs, nullptr);
  EXPECT_EQ(p.listener->pd, nullptr);
  auto* local = reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(p.listener));
  EXPECT_EQ(ntohl(local->sin_addr.s_addr), 0x7f000001u);
  ASSERT_EQ(rdma_listen(p.listener, 1), 0);
  rdma_cm_id* c;
  ASSERT_EQ(rdma_create_id(p.cch, &c, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in src = sin_of(kClientIp, 0), dst = sin_of(kServerIp, 7011);
  ASSERT_EQ(rdma_resolve_addr(c, sa(src), sa(dst), 2000), 0);
  expect(p.cch, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(c, 2000), 0);
  expect(p.cch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  rdma_conn_param cp{};
  cp.qp_num = 0x42;
  ASSERT_EQ(rdma_connect(c, &cp), 0);
  Seen req = expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(req.id, nullptr);
  EXPECT_STREQ(ibv_get_device_name(req.id->verbs->device), "uroce0");
  rdma_reject(req.id, nullptr, 0);
  expect(p.cch, RDMA_CM_EVENT_REJECTED, 28);
  rdma_destroy_id(req.id);
  rdma_destroy_id(c);
}

// An address no uroce device has, and an IPv6 address: refused with the kernel CM's errno, and
// said at the default log level with what to do — once per cause, not once per call.
// An address no device has, of either family, is EADDRNOTAVAIL (an IPv6 one where the devices are
// IPv4: the kernel's rdma_translate_ip finds no netdev with it either), an address of a family
// rdma_cm does not serve without a system librdmacm EAFNOSUPPORT; each said once.
TEST(RdmaCm, AnAddressNoDeviceHasAndOtherFamiliesAreSaidOnce) {
  rdma_event_channel* ch = rdma_create_event_channel();
  uroce::test::StderrCapture cap;
  for (int i = 0; i < 2; ++i) {
    rdma_cm_id* id;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in foreign = sin_of(0xc0000202, 7016);  // 192.0.2.2: no uroce device has it
    EXPECT_EQ(rdma_bind_addr(id, sa(foreign)), -1);
    EXPECT_EQ(errno, EADDRNOTAVAIL);
    sockaddr_in6 v6{};
    v6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::2", &v6.sin6_addr);
    v6.sin6_port = htons(7016);
    EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&v6)), -1);
    EXPECT_EQ(errno, EADDRNOTAVAIL);
    sockaddr_storage ib{};
    ib.ss_family = AF_IB;
    EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&ib)), -1);
    EXPECT_EQ(errno, EAFNOSUPPORT);
    rdma_destroy_id(id);
  }
  const std::string log = cap.text();
  const auto count = [&](const std::string& text) {
    size_t n = 0;
    for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("rdma_cm: rdma_bind_addr(192.0.2.2): EADDRNOTAVAIL: no uroce device has this "
                  "address"),
            1u)
      << log;
  EXPECT_EQ(count("rdma_cm: rdma_bind_addr(2001:db8::2): EADDRNOTAVAIL"), 1u) << log;
  EXPECT_EQ(count("rdma_cm: rdma_bind_addr: EAFNOSUPPORT"), 1u) << log;
  rdma_destroy_event_channel(ch);
}

TEST(RdmaCm, BadInputIsRefused) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id *id, *id2;
  EXPECT_EQ(rdma_create_id(ch, &id, nullptr, static_cast<rdma_port_space>(0x77)), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_create_id(ch, &id2, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in foreign = sin_of(0xc0000201, 7010);  // 192.0.2.1: no uroce device has it
  EXPECT_EQ(rdma_bind_addr(id, sa(foreign)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  sockaddr_in s = sin_of(kServerIp, 7010);
  ASSERT_EQ(rdma_bind_addr(id, sa(s)), 0);
  EXPECT_EQ(rdma_bind_addr(id2, sa(s)), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  EXPECT_EQ(rdma_connect(id, nullptr), -1);  // no route resolved
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_accept(id, nullptr), -1);  // not a connection request
  EXPECT_EQ(errno, EINVAL);
  uint8_t tos = 0;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1), 0);
  uint8_t t = 18;
  EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, 1), 0);
  EXPECT_EQ(rdma_set_option(id, 9, 0, &t, 1), -1);
  ibv_qp_attr qa{};
  int mask = 0;
  qa.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(rdma_init_qp_attr(id, &qa, &mask), 0);
  EXPECT_EQ(mask & (IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS),
            IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS);
  EXPECT_EQ(qa.port_num, 1);
  qa.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(rdma_init_qp_attr(id, &qa, &mask), -1);  // not connecting: no RTR attributes
  char big[100] = {};
  rdma_cm_id* c;
  ASSERT_EQ(rdma_create_id(ch, &c, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst = sin_of(kServerIp, 7010);
  ASSERT_EQ(rdma_resolve_addr(c, nullptr, sa(dst), 1000), 0);
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(c, 1000), 0);
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  rdma_conn_param cp{};
  cp.private_data = big;
  cp.private_data_len = 57;  // 92 bytes less the 36-byte IP CM header leaves 56
  EXPECT_EQ(rdma_connect(c, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
  cp.private_data_len = 0;
  cp.responder_resources = 200;  // above the device's max_qp_rd_atom
  EXPECT_EQ(rdma_connect(c, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_destroy_id(c);
  rdma_destroy_id(id2);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
}

TEST(RdmaCm, MulticastJoinOnAUdId) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_UDP), 0);
  sockaddr_in s = sin_of(kServerIp, 0);
  ASSERT_EQ(rdma_bind_addr(id, sa(s)), 0);
  ibv_qp_init_attr a = qp_attr(IBV_QPT_UD);
  ASSERT_EQ(rdma_create_qp(id, nullptr, &a), 0);
  sockaddr_in g = sin_of(0xe0010203, 0);  // 224.1.2.3
  int ctx = 0;
  ASSERT_EQ(rdma_join_multicast(id, sa(g), &ctx), 0);
  rdma_cm_event* e = next(ch);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->event, RDMA_CM_EVENT_MULTICAST_JOIN);
  EXPECT_EQ(e->param.ud.qp_num, 0xffffffu);
  EXPECT_EQ(e->param.ud.private_data, &ctx);
  EXPECT_EQ(e->param.ud.ah_attr.grh.dgid.raw[15], 3);
  rdma_ack_cm_event(e);
  EXPECT_EQ(rdma_leave_multicast(id, sa(g)), 0);
  EXPECT_EQ(rdma_leave_multicast(id, sa(g)), -1);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
}

}  // namespace
