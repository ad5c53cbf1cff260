// uroce's rdma_cm forwarding ids it does not own to the system librdmacm
// (src/cm/rdma_cm_forward.cc, docs/rdma-cm.md "Ids of other RDMA devices"). The program is linked
// against the system librdmacm and runs under uroce-run, as an application does; CMake runs it
//  - with the fake librdmacm of tests/cm/fake_rdmacm in the system library's place
//    (LD_LIBRARY_PATH): a made-up RDMA device that owns 192.0.2.1, with librdmacm's event
//    sequences (the Fake* tests);
//  - with the system librdmacm itself, which on a host without kernel RDMA cannot open an event
//    channel (the System* tests).
// uroce's own devices are uroce0=127.0.45.1 and uroce1=127.0.45.2. Every wait is bounded.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint32_t kUroce0 = 0x7f002d01;   // 127.0.45.1
constexpr uint32_t kUroce1 = 0x7f002d02;   // 127.0.45.2
constexpr uint32_t kFake = 0xc0000201;     // 192.0.2.1, the fake device's
constexpr uint32_t kRefused = 0xc6336407;  // 198.51.100.7: the fake refuses it with EACCES

class Env : public ::testing::Environment {
 public:
  void SetUp() override { setenv("UROCE_DEVICES", "uroce0=127.0.45.1,uroce1=127.0.45.2", 1); }
};
[[maybe_unused]] const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Env);

sockaddr_in sin_of(uint32_t ip, uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(ip);
  s.sin_port = htons(port);
  return s;
}

sockaddr* sa(sockaddr_in& s) {
  return reinterpret_cast<sockaddr*>(&s);
}

// The fake library's call counter; null when the system librdmacm is loaded.
int (*fake_calls())() {
  return reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "fake_rdmacm_calls"));
}

std::string device_of(rdma_cm_id* id) {
  return id->verbs ? id->verbs->device->name : "";
}

// The next event of `ch`, waiting at most 10 s on its fd; nullptr when none came.
rdma_cm_event* next(rdma_event_channel* ch) {
  pollfd p{ch->fd, POLLIN, 0};
  for (;;) {
    if (poll(&p, 1, 10000) != 1) return nullptr;
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(ch, &e) == 0) return e;
    if (errno != EAGAIN) return nullptr;  // another source woke the poll: wait again
  }
}

struct Seen {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  int status = -1;
  rdma_cm_id* id = nullptr;
  rdma_cm_id* listen_id = nullptr;
  std::string pd;
};

// The next event, which must be `type` (with `status`); acknowledged.
Seen expect(rdma_event_channel* ch, rdma_cm_event_type type, int status = 0) {
  Seen s;
  rdma_cm_event* e = next(ch);
  EXPECT_NE(e, nullptr) << "no event, expected " << rdma_event_str(type);
  if (!e) return s;
  s = {e->event, e->status, e->id, e->listen_id, {}};
  if (e->param.conn.private_data && e->param.conn.private_data_len)
    s.pd.assign(static_cast<const char*>(e->param.conn.private_data),
                strnlen(static_cast<const char*>(e->param.conn.private_data),
                        e->param.conn.private_data_len));
  EXPECT_EQ(e->event, type) << rdma_event_str(e->event);
  EXPECT_EQ(e->status, status);
  EXPECT_EQ(rdma_ack_cm_event(e), 0);
  return s;
}

// The events of `ch` until `n` have come, by id (in their order for each id).
std::map<rdma_cm_id*, std::vector<rdma_cm_event_type>> collect(rdma_event_channel* ch, int n,
                                                               rdma_cm_id** new_id = nullptr) {
  std::map<rdma_cm_id*, std::vector<rdma_cm_event_type>> by_id;
  for (int i = 0; i < n; ++i) {
    rdma_cm_event* e = next(ch);
    EXPECT_NE(e, nullptr) << "event " << i << " of " << n << " did not come";
    if (!e) break;
    EXPECT_EQ(e->status, 0) << rdma_event_str(e->event);
    by_id[e->id].push_back(e->event);
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST && new_id) *new_id = e->id;
    rdma_ack_cm_event(e);
  }
  return by_id;
}

// An id of the fake device listening on 192.0.2.1:port.
rdma_cm_id* fake_listener(rdma_event_channel* ch, uint16_t port, void* ctx = nullptr) {
  rdma_cm_id* l = nullptr;
  EXPECT_EQ(rdma_create_id(ch, &l, ctx, RDMA_PS_TCP), 0);
  auto a = sin_of(kFake, port);
  EXPECT_EQ(rdma_bind_addr(l, sa(a)), 0) << strerror(errno);
  EXPECT_EQ(rdma_listen(l, 4), 0) << strerror(errno);
  return l;
}

// ---- with the fake librdmacm ----------------------------------------------------------------

class Fake : public ::testing::Test {
 protected:
  void SetUp() override {
    calls_ = fake_calls();
    ASSERT_NE(calls_, nullptr) << "the fake librdmacm is not loaded (LD_LIBRARY_PATH)";
    unsetenv("FAKE_RDMACM_NODEV");
  }
  int (*calls_)() = nullptr;
};

// Ids on uroce's addresses, wildcard and loopback stay uroce's — a connection between its two
// devices included — and the real library is never called.
TEST_F(Fake, UroceIdsNeverTouchTheRealLibrary) {
  const int before = calls_();
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id *l = nullptr, *c = nullptr, *w = nullptr, *lo = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &l, nullptr, RDMA_PS_TCP), 0);
  auto la = sin_of(kUroce0, 7301);
  ASSERT_EQ(rdma_bind_addr(l, sa(la)), 0);
  ASSERT_EQ(rdma_listen(l, 4), 0);
  EXPECT_EQ(device_of(l), "uroce0");
  ASSERT_EQ(rdma_create_id(ch, &w, nullptr, RDMA_PS_TCP), 0);
  auto any = sin_of(INADDR_ANY, 0);
  ASSERT_EQ(rdma_bind_addr(w, sa(any)), 0);
  ASSERT_EQ(rdma_create_id(ch, &lo, nullptr, RDMA_PS_TCP), 0);
  auto loop = sin_of(0x7f000001, 0);
  ASSERT_EQ(rdma_bind_addr(lo, sa(loop)), 0);

  ASSERT_EQ(rdma_create_id(ch, &c, nullptr, RDMA_PS_TCP), 0);
  auto src = sin_of(kUroce1, 0);
  ASSERT_EQ(rdma_resolve_addr(c, sa(src), sa(la), 2000), 0);
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(device_of(c), "uroce1");
  ASSERT_EQ(rdma_resolve_route(c, 2000), 0);
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  rdma_conn_param p{};
  p.qp_num = 0x123;  // no QP: the application's own, as far as the CM knows
  ASSERT_EQ(rdma_connect(c, &p), 0);
  Seen req = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(req.id, nullptr);
  EXPECT_EQ(req.listen_id, l);
  EXPECT_EQ(device_of(req.id), "uroce0");
  rdma_conn_param ap{};
  ap.qp_num = 0x456;
  ASSERT_EQ(rdma_accept(req.id, &ap), 0);
  // The active side without a QP gets CONNECT_RESPONSE and establishes itself.
  expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
  ASSERT_EQ(rdma_establish(c), 0);  // its RTU: ESTABLISHED for the passive side
  EXPECT_EQ(expect(ch, RDMA_CM_EVENT_ESTABLISHED).id, req.id);

  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_flags = RAI_PASSIVE;
  ASSERT_EQ(rdma_getaddrinfo("127.0.45.1", "7302", &hints, &res), 0);
  rdma_freeaddrinfo(res);
  int n = 0;
  ibv_context** devs = rdma_get_devices(&n);
  ASSERT_NE(devs, nullptr);
  EXPECT_EQ(n, 2);
  rdma_free_devices(devs);

  for (rdma_cm_id* id : {req.id, c, lo, w, l}) EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
  EXPECT_EQ(calls_(), before) << "uroce called the real library for its own ids";
}

// An id bound to the fake device's address is the real library's from then on: its events come
// through the application's channel with the application's ids, the public fields follow the
// real id, a connection request makes a new id of the application's, and the QP and CQs are
// the real library's.
TEST_F(Fake, ForeignIdIsForwarded) {
  const int before = calls_();
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_event_channel* ch2 = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  ASSERT_NE(ch2, nullptr);
  int lctx = 0, cctx = 0;
  rdma_cm_id* l = fake_listener(ch, 7400, &lctx);
  EXPECT_GT(calls_(), before);
  EXPECT_EQ(device_of(l), "fake0");
  EXPECT_EQ(l->port_num, 1);
  EXPECT_EQ(l->channel, ch);
  EXPECT_EQ(l->context, &lctx);
  EXPECT_EQ(rdma_get_src_port(l), htons(7400));
  EXPECT_EQ(ntohl(l->route.addr.src_sin.sin_addr.s_addr), kFake);

  rdma_cm_id* c = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &c, &cctx, RDMA_PS_TCP), 0);
  uint8_t tos = 0x28;  // set before the id is forwarded: replayed on the real id
  ASSERT_EQ(rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos), 0);
  auto src = sin_of(kFake, 0), dst = sin_of(kFake, 7400);
  ASSERT_EQ(rdma_resolve_addr(c, sa(src), sa(dst), 2000), 0) << strerror(errno);
  Seen s = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(s.id, c);
  EXPECT_EQ(device_of(c), "fake0");
  EXPECT_NE(c->pd, nullptr);
  EXPECT_EQ(rdma_get_dst_port(c), htons(7400));
  ASSERT_EQ(rdma_resolve_route(c, 2000), 0);
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ASSERT_EQ(c->route.num_paths, 1);
  ASSERT_NE(c->route.path_rec, nullptr);
  EXPECT_EQ(c->route.path_rec->traffic_class, tos);

  // rdma_create_qp of the fake calls rdma_create_qp_ex through the PLT, which lands in liburoce
  // with the fake's id: it must pass straight through.
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  ASSERT_EQ(rdma_create_qp(c, nullptr, &qa), 0) << strerror(errno);
  ASSERT_NE(c->qp, nullptr);
  EXPECT_EQ(c->qp->context, c->verbs);
  EXPECT_NE(c->send_cq, nullptr);  // made by the real library, as librdmacm does
  EXPECT_EQ(c->qp->send_cq, c->send_cq);
  EXPECT_EQ(c->pd, c->qp->pd);

  // Migrated before connecting: its events now come on ch2.
  ASSERT_EQ(rdma_migrate_id(c, ch2), 0) << strerror(errno);
  EXPECT_EQ(c->channel, ch2);
  rdma_conn_param p{};
  p.private_data = "hello";
  p.private_data_len = 6;
  p.responder_resources = p.initiator_depth = 1;
  ASSERT_EQ(rdma_connect(c, &p), 0);
  Seen req = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* a = req.id;
  ASSERT_NE(a, nullptr);
  EXPECT_NE(a, l);
  EXPECT_NE(a, c);
  EXPECT_EQ(req.listen_id, l);
  EXPECT_EQ(req.pd, "hello");
  EXPECT_EQ(a->context, &lctx);  // a request's id carries the listener's context
  EXPECT_EQ(a->channel, ch);
  EXPECT_EQ(device_of(a), "fake0");
  ASSERT_EQ(rdma_create_qp(a, nullptr, &qa), 0);
  rdma_conn_param ap{};
  ap.private_data = "world";
  ap.private_data_len = 6;
  // The fake's rdma_accept calls rdma_init_qp_attr through the PLT, as librdmacm's does.
  ASSERT_EQ(rdma_accept(a, &ap), 0) << strerror(errno);
  Seen est = expect(ch2, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(est.id, c);
  EXPECT_EQ(est.pd, "world");
  EXPECT_EQ(expect(ch, RDMA_CM_EVENT_ESTABLISHED).id, a);

  ASSERT_EQ(rdma_disconnect(c), 0);
  EXPECT_EQ(expect(ch2, RDMA_CM_EVENT_DISCONNECTED).id, c);
  EXPECT_EQ(expect(ch, RDMA_CM_EVENT_DISCONNECTED).id, a);
  // The real library's error for a call on a forwarded id, unchanged.
  EXPECT_EQ(rdma_disconnect(c), -1);
  EXPECT_EQ(errno, EINVAL);
  uint8_t x = 0;
  EXPECT_EQ(rdma_set_option(c, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &x, 1), -1);
  EXPECT_EQ(errno, ENOSYS);  // uroce would say EOPNOTSUPP

  rdma_destroy_qp(a);
  rdma_destroy_qp(c);
  EXPECT_EQ(c->qp, nullptr);
  EXPECT_EQ(c->send_cq, nullptr);
  for (rdma_cm_id* id : {a, c, l}) EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch2);
  rdma_destroy_event_channel(ch);
}

// A connection request nobody listens for, and a refused request, as the real library reports
// them; an address the real library refuses, and one it cannot resolve, with its own errors.
TEST_F(Fake, RealErrorsPassUnchanged) {
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  auto refused = sin_of(kRefused, 0);
  EXPECT_EQ(rdma_bind_addr(id, sa(refused)), -1);
  EXPECT_EQ(errno, EACCES);  // the fake's own answer; uroce alone says EADDRNOTAVAIL
  // The id is still uroce's to use.
  auto mine = sin_of(kUroce0, 0);
  EXPECT_EQ(rdma_bind_addr(id, sa(mine)), 0);
  EXPECT_EQ(device_of(id), "uroce0");
  EXPECT_EQ(rdma_destroy_id(id), 0);

  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  auto src = sin_of(kFake, 0), nowhere = sin_of(0xc0000263, 1);  // 192.0.2.99
  ASSERT_EQ(rdma_resolve_addr(id, sa(src), sa(nowhere), 2000), 0);
  expect(ch, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH);
  EXPECT_EQ(rdma_destroy_id(id), 0);

  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  auto dst = sin_of(kFake, 7499);  // nobody listens
  ASSERT_EQ(rdma_resolve_addr(id, sa(src), sa(dst), 2000), 0);
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ASSERT_EQ(rdma_connect(id, nullptr), 0);
  expect(ch, RDMA_CM_EVENT_REJECTED, 8);
  EXPECT_EQ(rdma_destroy_id(id), 0);

  rdma_cm_id* l = fake_listener(ch, 7401);
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  dst = sin_of(kFake, 7401);
  ASSERT_EQ(rdma_resolve_addr(id, sa(src), sa(dst), 2000), 0);
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ASSERT_EQ(rdma_connect(id, nullptr), 0);
  Seen req = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_EQ(rdma_reject(req.id, "no", 3), 0);
  Seen rej = expect(ch, RDMA_CM_EVENT_REJECTED, 28);
  EXPECT_EQ(rej.id, id);
  EXPECT_EQ(rej.pd, "no");
  for (rdma_cm_id* i : {req.id, id, l}) EXPECT_EQ(rdma_destroy_id(i), 0);

  // IPv6 is not uroce's at all: such an id is the real library's.
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in6 s6{};
  s6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::1", &s6.sin6_addr);
  EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&s6)), 0) << strerror(errno);
  EXPECT_EQ(device_of(id), "fake0");
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
}

// uroce's and the real library's events on one channel, interleaved, with the channel's fd
// polled and non-blocking: every event comes, each under the application's id.
TEST_F(Fake, BothKindsOnOneChannel) {
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* ul = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &ul, nullptr, RDMA_PS_TCP), 0);
  auto ua = sin_of(kUroce0, 7310);
  ASSERT_EQ(rdma_bind_addr(ul, sa(ua)), 0);
  ASSERT_EQ(rdma_listen(ul, 4), 0);
  rdma_cm_id* fl = fake_listener(ch, 7410);

  rdma_cm_id *uc = nullptr, *fc = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &uc, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_create_id(ch, &fc, nullptr, RDMA_PS_TCP), 0);
  auto usrc = sin_of(kUroce1, 0), fsrc = sin_of(kFake, 0), fdst = sin_of(kFake, 7410);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  rdma_cm_event* none = nullptr;
  EXPECT_EQ(rdma_get_cm_event(ch, &none), -1);
  EXPECT_EQ(errno, EAGAIN);

  ASSERT_EQ(rdma_resolve_addr(uc, sa(usrc), sa(ua), 2000), 0);
  ASSERT_EQ(rdma_resolve_addr(fc, sa(fsrc), sa(fdst), 2000), 0);
  auto seen = collect(ch, 2);
  EXPECT_EQ(seen[uc], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_ADDR_RESOLVED});
  EXPECT_EQ(seen[fc], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_ADDR_RESOLVED});
  EXPECT_EQ(device_of(uc), "uroce1");
  EXPECT_EQ(device_of(fc), "fake0");
  ASSERT_EQ(rdma_resolve_route(uc, 2000), 0);
  ASSERT_EQ(rdma_resolve_route(fc, 2000), 0);
  seen = collect(ch, 2);
  EXPECT_EQ(seen[uc], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_ROUTE_RESOLVED});
  EXPECT_EQ(seen[fc], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_ROUTE_RESOLVED});

  rdma_conn_param p{};
  p.qp_num = 0x77;
  ASSERT_EQ(rdma_connect(uc, &p), 0);
  ASSERT_EQ(rdma_connect(fc, &p), 0);
  std::vector<Seen> reqs;
  for (int i = 0; i < 2; ++i) reqs.push_back(expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST));
  ASSERT_EQ(reqs.size(), 2u);
  std::map<rdma_cm_id*, rdma_cm_id*> child;  // listener → its request's id
  for (const Seen& r : reqs) child[r.listen_id] = r.id;
  ASSERT_TRUE(child.count(ul) && child.count(fl));
  EXPECT_EQ(device_of(child[ul]), "uroce0");
  EXPECT_EQ(device_of(child[fl]), "fake0");
  rdma_conn_param ap{};
  ap.qp_num = 0x88;
  ASSERT_EQ(rdma_accept(child[ul], &ap), 0);
  ASSERT_EQ(rdma_accept(child[fl], &ap), 0);
  // uroce: CONNECT_RESPONSE to the QP-less active side (then ESTABLISHED for both after
  // rdma_establish); the fake: ESTABLISHED for both.
  seen = collect(ch, 3);
  EXPECT_EQ(seen[uc], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_CONNECT_RESPONSE});
  EXPECT_EQ(seen[fc], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_ESTABLISHED});
  EXPECT_EQ(seen[child[fl]], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_ESTABLISHED});
  ASSERT_EQ(rdma_establish(uc), 0);
  seen = collect(ch, 1);
  EXPECT_EQ(seen[child[ul]], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_ESTABLISHED});

  ASSERT_EQ(rdma_disconnect(fc), 0);
  seen = collect(ch, 2);
  EXPECT_EQ(seen[fc], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_DISCONNECTED});
  EXPECT_EQ(seen[child[fl]], std::vector<rdma_cm_event_type>{RDMA_CM_EVENT_DISCONNECTED});
  EXPECT_EQ(rdma_get_cm_event(ch, &none), -1);
  EXPECT_EQ(errno, EAGAIN);
  for (rdma_cm_id* id : {child[ul], child[fl], uc, fc, ul, fl}) EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
}

// Synchronous endpoints (rdma_create_ep from rdma_getaddrinfo, as rdma_server/rdma_client):
// each call waits for its event, now read from the real library.
TEST_F(Fake, SynchronousEndpoints) {
  rdma_addrinfo hints{}, *pres = nullptr, *ares = nullptr;
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo("192.0.2.1", "7420", &hints, &pres), 0);
  ibv_qp_init_attr qa{};
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  rdma_cm_id* listen = nullptr;
  ASSERT_EQ(rdma_create_ep(&listen, pres, nullptr, &qa), 0) << strerror(errno);
  EXPECT_EQ(device_of(listen), "fake0");
  ASSERT_EQ(rdma_listen(listen, 2), 0);

  rdma_cm_id* server_side = nullptr;
  int server_rc = -1, server_errno = 0;
  std::thread server([&] {
    server_rc = rdma_get_request(listen, &server_side);
    if (server_rc == 0) server_rc = rdma_accept(server_side, nullptr);
    server_errno = errno;
  });
  hints = {};
  hints.ai_port_space = RDMA_PS_TCP;
  auto src = sin_of(kFake, 0);  // a source, so that the host's routes do not matter
  hints.ai_src_addr = sa(src);
  hints.ai_src_len = sizeof src;
  ASSERT_EQ(rdma_getaddrinfo("192.0.2.1", "7420", &hints, &ares), 0);
  rdma_cm_id* client = nullptr;
  int rc = rdma_create_ep(&client, ares, nullptr, &qa);
  EXPECT_EQ(rc, 0) << strerror(errno);
  if (rc == 0) {
    EXPECT_EQ(device_of(client), "fake0");
    EXPECT_NE(client->qp, nullptr);
    EXPECT_EQ(rdma_connect(client, nullptr), 0) << strerror(errno);
    ASSERT_NE(client->event, nullptr);
    EXPECT_EQ(client->event->event, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(client->event->id, client);
  } else {
    rdma_destroy_ep(listen);  // lets the server thread's wait end
    listen = nullptr;
  }
  server.join();
  EXPECT_EQ(server_rc, 0) << strerror(server_errno);
  if (server_side) {
    EXPECT_NE(server_side->qp, nullptr);  // made from the endpoint's attributes
    EXPECT_NE(server_side->channel, listen ? listen->channel : nullptr);  // a channel of its own
    ASSERT_NE(server_side->event, nullptr);
    EXPECT_EQ(server_side->event->event, RDMA_CM_EVENT_ESTABLISHED);
    rdma_destroy_ep(server_side);
  }
  if (client) rdma_destroy_ep(client);
  if (listen) rdma_destroy_ep(listen);
  rdma_freeaddrinfo(ares);
  rdma_freeaddrinfo(pres);
}

// Without kernel RDMA the real library cannot make an event channel: an id on a foreign address
// gets its ENODEV, and stays usable for uroce.
TEST_F(Fake, NoRdmaStackGivesTheRealError) {
  setenv("FAKE_RDMACM_NODEV", "1", 1);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);  // uroce's
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  auto fake = sin_of(kFake, 0);
  EXPECT_EQ(rdma_bind_addr(id, sa(fake)), -1);
  EXPECT_EQ(errno, ENODEV);
  auto dst = sin_of(kFake, 7430);
  EXPECT_EQ(rdma_resolve_addr(id, sa(fake), sa(dst), 2000), -1);
  EXPECT_EQ(errno, ENODEV);
  auto mine = sin_of(kUroce0, 0);
  EXPECT_EQ(rdma_bind_addr(id, sa(mine)), 0);
  EXPECT_EQ(device_of(id), "uroce0");
  EXPECT_EQ(rdma_destroy_id(id), 0);
  // Without a source, the kernel's route decides; with no RDMA stack behind the kernel's
  // interfaces only uroce can reach anything, so uroce serves the id as it always did.
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0) << strerror(errno);
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(device_of(id).rfind("uroce", 0), 0u) << device_of(id);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
  unsetenv("FAKE_RDMACM_NODEV");
}

// The source address the kernel's route towards `dst` leaves from (0: no route).
uint32_t route_source(uint32_t dst) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  auto to = sin_of(dst, 4791);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  uint32_t src = 0;
  if (connect(fd, sa(to), sizeof to) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0)
    src = ntohl(me.sin_addr.s_addr);
  close(fd);
  return src;
}

// A resolve without a source whose route leaves from an address no uroce device has goes to the
// real library (which reaches 192.0.2.1 itself here).
TEST_F(Fake, ResolveWithoutSourceFollowsTheRoute) {
  uint32_t src = route_source(kFake);
  if (src == 0 || (src >> 24) == 127)
    GTEST_SKIP() << "no route to 192.0.2.1 from a non-loopback address";
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  auto dst = sin_of(kFake, 7440);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0) << strerror(errno);
  EXPECT_EQ(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED).id, id);
  EXPECT_EQ(device_of(id), "fake0");
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
}

// ---- with the system librdmacm ------------------------------------------------------------

// The system library's answer to an address no uroce device has, whatever this host's RDMA
// stack is: the test asks the library itself (through its handle, past liburoce) what it says.
TEST(System, ForeignAddressGetsTheSystemLibrarysError) {
  ASSERT_EQ(fake_calls(), nullptr) << "run with the system librdmacm";
  void* h = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto real_create = reinterpret_cast<rdma_event_channel* (*)()>(
      dlvsym(h, "rdma_create_event_channel", "RDMACM_1.0"));
  ASSERT_NE(real_create, nullptr);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  auto fake = sin_of(kFake, 0);
  int rc = rdma_bind_addr(id, sa(fake));
  int err = errno;
  errno = 0;
  rdma_event_channel* probe = real_create();
  if (probe) GTEST_SKIP() << "this host has kernel RDMA: bind said " << rc << " " << strerror(err);
  EXPECT_EQ(rc, -1);
  EXPECT_EQ(err, errno) << strerror(err) << " vs " << strerror(errno);
  // And uroce's ids work on.
  auto mine = sin_of(kUroce0, 0);
  EXPECT_EQ(rdma_bind_addr(id, sa(mine)), 0);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
  dlclose(h);
}

}  // namespace
