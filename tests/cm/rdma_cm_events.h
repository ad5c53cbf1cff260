// What the in-process rdma_cm tests (rdma_cm_test.cc, rdma_cm_ipv6_test.cc) share: taking events
// off a channel with a bound on the wait, the fields they look at, and a QP's attributes.
#pragma once

#include <poll.h>
#include <rdma/rdma_cma.h>

#include <gtest/gtest.h>

#include <cstdint>
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

}  // namespace uroce::test
