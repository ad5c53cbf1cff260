// Two-device RC set-up shared by the engine tests that drive real Devices over loopback
// (device_test.cc, faults_test.cc): a device configuration, one side of a connection (a QP with
// its CQs and buffer), the RESET → INIT → RTR → RTS sequence, and bounded CQ polling.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/config.h"
#include "engine/cq.h"
#include "engine/device.h"

namespace uroce::test {

using namespace std::chrono_literals;

inline DeviceConfig config(const char* name, uint32_t ip, FaultConfig faults = {}) {
  DeviceConfig c;
  c.name = name;
  c.ipv4 = ip;
  c.netdev = "lo";
  c.faults = faults;
  return c;
}

// Sets or unsets UROCE_PUBLISH (publishing to `uroce stats`) for one test.
class PublishEnv {
 public:
  explicit PublishEnv(const char* v) {
    if (const char* old = std::getenv("UROCE_PUBLISH")) saved_ = old;
    if (v)
      setenv("UROCE_PUBLISH", v, 1);
    else
      unsetenv("UROCE_PUBLISH");
  }
  ~PublishEnv() {
    if (saved_)
      setenv("UROCE_PUBLISH", saved_->c_str(), 1);
    else
      unsetenv("UROCE_PUBLISH");
  }

 private:
  std::optional<std::string> saved_;
};

inline std::unique_ptr<Device> open_device(const DeviceConfig& c) {
  std::string err;
  auto d = Device::open(c, &err);
  EXPECT_NE(d, nullptr) << err;
  return d;
}

// One side of a connection: a QP with its CQs and buffer, on a device it owns or borrows.
struct Side {
  std::unique_ptr<Device> owned;
  Device* dev = nullptr;
  std::unique_ptr<CompChannel> channel = std::make_unique<CompChannel>();
  std::unique_ptr<Cq> scq, rcq;
  uint32_t pd = 0;
  std::vector<uint8_t> buf;
  uint32_t lkey = 0, rkey = 0;
  transport::Qp* qp = nullptr;

  // An owned device (engine, QPs) goes first: it writes into the buffer and the CQs until it
  // stops. A borrowing Side must outlive its device's owner or destroy its QP first.
  ~Side() { owned.reset(); }

  bool setup(const DeviceConfig& c, size_t buf_len) {
    owned = open_device(c);
    if (!owned) return false;
    return attach(*owned, buf_len);
  }

  bool attach(Device& d, size_t buf_len) {
    dev = &d;
    scq = std::make_unique<Cq>(256, channel.get(), this);
    rcq = std::make_unique<Cq>(256, channel.get(), this);
    pd = dev->alloc_pd();
    buf.assign(buf_len, 0);
    if (dev->reg_mr(pd, buf.data(), buf.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
                    &lkey, &rkey) != 0)
      return false;
    transport::QpInit init;
    init.type = IBV_QPT_RC;
    init.pd = pd;
    init.max_send_wr = init.max_recv_wr = 128;
    init.max_send_sge = init.max_recv_sge = 4;
    init.max_inline_data = 64;
    init.send_cq = scq.get();
    init.recv_cq = rcq.get();
    int err = 0;
    qp = dev->create_qp(init, &err);
    EXPECT_EQ(err, 0);
    return qp != nullptr;
  }
};

inline ibv_gid gid_of(uint32_t ip) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  uint32_t be = htonl(ip);
  std::memcpy(&g.raw[12], &be, 4);
  return g;
}

// RESET → INIT → RTR → RTS towards `remote` (ibv_modify_qp(3) required attributes).
inline void connect(Side& s, const Side& remote, uint8_t timeout = 14, uint8_t rnr_retry = 7,
                    uint8_t min_rnr_timer = 1) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(s.dev->modify_qp(s.qp, a,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote.qp->qpn();
  a.rq_psn = 0x100;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = min_rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid_of(remote.dev->ipv4());
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  ASSERT_EQ(s.dev->modify_qp(s.qp, a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = timeout;
  a.retry_cnt = 7;
  a.rnr_retry = rnr_retry;
  a.sq_psn = 0x100;
  a.max_rd_atomic = 4;
  ASSERT_EQ(s.dev->modify_qp(s.qp, a,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
            0);
  EXPECT_EQ(s.qp->state(), IBV_QPS_RTS);
}

inline std::vector<ibv_wc> poll_n(Cq& cq, size_t n, std::chrono::milliseconds limit = 5000ms) {
  std::vector<ibv_wc> out;
  auto end = std::chrono::steady_clock::now() + limit;
  ibv_wc wc[16];
  while (out.size() < n && std::chrono::steady_clock::now() < end) {
    int k = cq.poll(16, wc);
    if (k == 0) std::this_thread::sleep_for(200us);
    out.insert(out.end(), wc, wc + k);
  }
  return out;
}

}  // namespace uroce::test
