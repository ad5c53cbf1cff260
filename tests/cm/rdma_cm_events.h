// What the in-process rdma_cm tests (rdma_cm_test.cc, rdma_cm_ipv6_test.cc) share: taking events
// off a channel with a bound on the wait, the fields they look at, and a QP's attributes.
#pragma once

#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace uroce::test {

template <typename T>
sockaddr* sa(T& s) {
  return reinterpret_cast<sockaddr*>(&s);
}

// The next event of `ch`, waiting at most `ms`; nullptr when none came.
inline rdma_cm_event* next(rdma_event_channel* ch, int ms = 10000) {
  pollfd p{ch->fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return nullptr;
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e) != 0) return nullptr;
  return e;
}

// A copy of the fields of an event the tests look at (the event itself is acknowledged).
struct Seen {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  int status = -1;
  rdma_cm_id* id = nullptr;
  rdma_cm_id* listen_id = nullptr;
  std::vector<uint8_t> pd;  // private data (a UD id's from param.ud)
  rdma_conn_param conn{};
  rdma_ud_param ud{};
};

// Takes the next event, expects its type and status, and acknowledges it.
inline Seen expect(rdma_event_channel* ch, rdma_cm_event_type type, int status = 0) {
  Seen s;
  rdma_cm_event* e = next(ch);
  EXPECT_NE(e, nullptr) << "no event, expected " << rdma_event_str(type);
  if (!e) return s;
  s.type = e->event;
  s.status = e->status;
  s.id = e->id;
  s.listen_id = e->listen_id;
  s.conn = e->param.conn;
  s.ud = e->param.ud;
  const bool ud = e->id->qp_type == IBV_QPT_UD;
  const void* pd = ud ? e->param.ud.private_data : e->param.conn.private_data;
  const uint8_t len = ud ? e->param.ud.private_data_len : e->param.conn.private_data_len;
  if (pd && len)
    s.pd.assign(static_cast<const uint8_t*>(pd), static_cast<const uint8_t*>(pd) + len);
  EXPECT_EQ(e->event, type) << rdma_event_str(e->event) << " instead of " << rdma_event_str(type);
  EXPECT_EQ(e->status, status) << rdma_event_str(e->event);
  EXPECT_EQ(rdma_ack_cm_event(e), 0);
  return s;
}

inline ibv_qp_init_attr qp_attr(ibv_qp_type t = IBV_QPT_RC) {
  ibv_qp_init_attr a{};
  a.qp_type = t;
  a.cap.max_send_wr = a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  return a;
}

// What CmPair::ud_exchange saw: the client's ESTABLISHED event, the child's receive buffer (the
// 40-byte GRH area, then the 64-byte datagram) and the receive's completion.
struct UdExchange {
  Seen est;
  std::vector<char> rbuf = std::vector<char>(40 + 64);
  ibv_wc wc{};
};

// A listener and a client id resolved to it, each on its own event channel; the tests' own Pair
// adds how they name the addresses.
struct CmPair {
  rdma_event_channel* sch = rdma_create_event_channel();
  rdma_event_channel* cch = rdma_create_event_channel();
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
  rdma_cm_id* child = nullptr;  // the passive side's id of the connection

  void listen_at(sockaddr* addr, rdma_port_space ps) {
    ASSERT_EQ(rdma_create_id(sch, &listener, this, ps), 0);
    ASSERT_EQ(rdma_bind_addr(listener, addr), 0);
    ASSERT_EQ(rdma_listen(listener, 4), 0);
  }
  // src nullptr: the address the route gives.
  void resolve_to(sockaddr* src, sockaddr* dst, rdma_port_space ps) {
    ASSERT_EQ(rdma_create_id(cch, &client, this, ps), 0);
    ASSERT_EQ(rdma_resolve_addr(client, src, dst, 2000), 0);
    expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_EQ(rdma_resolve_route(client, 2000), 0);
    expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  }
  // On a connection: `text` (NUL included) sent from client to child into a receive the child
  // posted at `rbuf` (registered as rmr), both completions checked; both MRs deregistered.
  void send_and_check(const char* text, std::vector<char>& rbuf, ibv_mr* rmr) {
    std::vector<char> sbuf(text, text + std::strlen(text) + 1);
    ibv_mr* smr = rdma_reg_msgs(client, sbuf.data(), sbuf.size());
    ASSERT_NE(smr, nullptr);
    ASSERT_EQ(rdma_post_send(client, nullptr, sbuf.data(), sbuf.size(), smr, IBV_SEND_SIGNALED), 0);
    ibv_wc wc;
    ASSERT_EQ(rdma_get_recv_comp(child, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_STREQ(rbuf.data(), text);
    ASSERT_EQ(rdma_get_send_comp(client, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    rdma_dereg_mr(smr);
    rdma_dereg_mr(rmr);
  }
  // On UD ids (the client's UD QP created): SIDR, its REQ carrying `text` (NUL included) to the
  // listener, whose child gets a UD QP and accepts; the client's ESTABLISHED names the child's QP.
  // Then one 64-byte datagram from the client to the address and QPN the event gave, received by
  // the child, both completions taken (the receive's checked). What it saw goes to *x.
  void ud_exchange(const char* text, UdExchange* x) {
    const size_t len = std::strlen(text) + 1;
    rdma_conn_param cp{};
    cp.private_data = text;
    cp.private_data_len = static_cast<uint8_t>(len);
    ASSERT_EQ(rdma_connect(client, &cp), 0);
    Seen req = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
    child = req.id;
    ASSERT_GE(req.pd.size(), len);
    EXPECT_EQ(std::memcmp(req.pd.data(), text, len), 0);
    ibv_qp_init_attr a = qp_attr(IBV_QPT_UD);
    ASSERT_EQ(rdma_create_qp(child, nullptr, &a), 0);
    ASSERT_EQ(rdma_accept(child, nullptr), 0);
    x->est = expect(cch, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(x->est.ud.qp_num, child->qp->qp_num);
    // The event's address works: a datagram reaches the child's QP.
    ibv_ah* ah = ibv_create_ah(client->pd, &x->est.ud.ah_attr);
    ASSERT_NE(ah, nullptr);
    std::vector<char> sbuf(64, 'u');
    ibv_mr* rmr = rdma_reg_msgs(child, x->rbuf.data(), x->rbuf.size());
    ibv_mr* smr = rdma_reg_msgs(client, sbuf.data(), sbuf.size());
    ASSERT_EQ(rdma_post_recv(child, nullptr, x->rbuf.data(), x->rbuf.size(), rmr), 0);
    ASSERT_EQ(rdma_post_ud_send(client, nullptr, sbuf.data(), sbuf.size(), smr, IBV_SEND_SIGNALED,
                                ah, x->est.ud.qp_num),
              0);
    ASSERT_EQ(rdma_get_recv_comp(child, &x->wc), 1);
    EXPECT_EQ(x->wc.status, IBV_WC_SUCCESS);
    ibv_wc swc;
    ASSERT_EQ(rdma_get_send_comp(client, &swc), 1);
    ibv_destroy_ah(ah);
    rdma_dereg_mr(smr);
    rdma_dereg_mr(rmr);
  }
  // The client disconnects; both sides hear it.
  void disconnect() {
    ASSERT_EQ(rdma_disconnect(client), 0);
    expect(sch, RDMA_CM_EVENT_DISCONNECTED);
    ASSERT_EQ(rdma_disconnect(child), 0);  // answers the DREQ
    expect(cch, RDMA_CM_EVENT_DISCONNECTED);
  }
  ~CmPair() {
    for (rdma_cm_id* id : {child, client}) {
      if (!id) continue;
      rdma_destroy_qp(id);
      rdma_destroy_id(id);
    }
    if (listener) rdma_destroy_id(listener);
    rdma_destroy_event_channel(sch);
    rdma_destroy_event_channel(cch);
  }
};

}  // namespace uroce::test
