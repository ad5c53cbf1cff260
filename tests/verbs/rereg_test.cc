// ibv_rereg_mr and completion timestamps through the verbs API, driven as an application drives
// them: this binary links liburoce directly and connects two uroce devices on loopback addresses
// of its own (127.0.18.x). Device b's region is the target of a's RDMA WRITEs, so a change of
// its access or translation shows in what the peer may do.
#include <infiniband/verbs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "verbs_test_util.h"

namespace {

constexpr const char* kDevices = "uroce0=127.0.18.1,uroce1=127.0.18.2";

const auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new uroce::test::DevicesEnv(kDevices));

constexpr unsigned kLocal = IBV_ACCESS_LOCAL_WRITE;
constexpr unsigned kRemoteRw =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

class ReregTest : public ::testing::Test {
 protected:
  struct Side : uroce::test::RcSide {
    ibv_cq_ex* scqx = nullptr;  // scq with completion timestamps
  };

  void SetUp() override {
    open_side(a_, "uroce0", kRemoteRw);
    // b's region starts without remote rights; tests grant them with ibv_rereg_mr.
    open_side(b_, "uroce1", kLocal | IBV_ACCESS_MW_BIND);
    if (HasFatalFailure()) return;
    uroce::test::connect_pair(a_, b_, {.access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE});
  }

  void TearDown() override {
    for (Side* s : {&a_, &b_}) uroce::test::close_rc(*s);
  }

  void open_side(Side& s, const char* name, unsigned access) {
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(s, name, access, 8192));
    ibv_cq_init_attr_ex ca{};
    ca.cqe = 64;
    ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                  IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
    s.scqx = ibv_create_cq_ex(s.ctx, &ca);
    ASSERT_NE(s.scqx, nullptr) << std::strerror(errno);
    s.scq = ibv_cq_ex_to_cq(s.scqx);
    s.rcq = ibv_create_cq(s.ctx, 64, nullptr, nullptr, 0);
    ASSERT_NE(s.rcq, nullptr);
    ibv_qp_init_attr ia{};
    ia.send_cq = s.scq;
    ia.recv_cq = s.rcq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 32;
    ia.cap.max_recv_wr = 32;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.sq_sig_all = 1;
    s.qp = ibv_create_qp(s.pd, &ia);
    ASSERT_NE(s.qp, nullptr) << std::strerror(errno);
  }

  struct Completion {
    bool got = false;
    ibv_wc_status status = IBV_WC_GENERAL_ERR;
    uint64_t wr_id = 0;
    uint64_t ts = 0;
    uint64_t wallclock_ns = 0;
  };
  // The next completion of s's send CQ through the extended poll API, with its timestamps.
  Completion next(Side& s, int ms = 3000) {
    Completion c;
    ibv_poll_cq_attr attr{};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < deadline) {
      int rc = ibv_start_poll(s.scqx, &attr);
      if (rc == ENOENT) {
        usleep(100);
        continue;
      }
      EXPECT_EQ(rc, 0);
      if (rc != 0) break;
      c.got = true;
      c.status = s.scqx->status;
      c.wr_id = s.scqx->wr_id;
      c.ts = ibv_wc_read_completion_ts(s.scqx);
      c.wallclock_ns = ibv_wc_read_completion_wallclock_ns(s.scqx);
      ibv_end_poll(s.scqx);
      break;
    }
    EXPECT_TRUE(c.got) << "no completion";
    return c;
  }

  // a RDMA WRITEs `len` bytes of a.buf[0..] to remote address `raddr` under `rkey`.
  void post_write(uint64_t raddr, uint32_t rkey, uint32_t len, uint64_t wr_id = 5) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(a_.buf.data()), len, a_.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  }
  ibv_wc_status write(uint64_t raddr, uint32_t rkey, uint32_t len) {
    post_write(raddr, rkey, len);
    return next(a_).status;
  }
  static uint64_t addr_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }

  Side a_, b_;
};

TEST_F(ReregTest, WriteWithoutRemoteAccessIsRefused) {
  // The baseline for the next test: the region as registered grants the peer nothing.
  std::memset(a_.buf.data(), 0x11, 64);
  EXPECT_EQ(write(addr_of(b_.buf.data()), b_.mr->rkey, 64), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(b_.buf[0], 0);
}

TEST_F(ReregTest, GrantingRemoteWriteLetsThePeerWrite) {
  const uint32_t lkey = b_.mr->lkey, rkey = b_.mr->rkey;
  ASSERT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         static_cast<int>(kRemoteRw)),
            0)
      << std::strerror(errno);
  // Keys, PD and translation are unchanged.
  EXPECT_EQ(b_.mr->lkey, lkey);
  EXPECT_EQ(b_.mr->rkey, rkey);
  EXPECT_EQ(b_.mr->pd, b_.pd);
  EXPECT_EQ(b_.mr->addr, b_.buf.data());
  EXPECT_EQ(b_.mr->length, b_.buf.size());
  std::memset(a_.buf.data(), 0x22, 64);
  EXPECT_EQ(write(addr_of(b_.buf.data() + 128), rkey, 64), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(b_.buf.data() + 128, a_.buf.data(), 64), 0);
}

TEST_F(ReregTest, RevokingRemoteWriteRefusesThePeer) {
  ASSERT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         static_cast<int>(kRemoteRw)),
            0);
  std::memset(a_.buf.data(), 0x33, 64);
  EXPECT_EQ(write(addr_of(b_.buf.data()), b_.mr->rkey, 64), IBV_WC_SUCCESS);
  // Remote read only: a write under the same key is now an access violation.
  ASSERT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            0);
  std::memset(a_.buf.data(), 0x44, 64);
  EXPECT_EQ(write(addr_of(b_.buf.data() + 256), b_.mr->rkey, 64), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(b_.buf[256], 0);
}

TEST_F(ReregTest, NewTranslationReceivesTheData) {
  std::vector<char> other(4096);
  ASSERT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS,
                         nullptr, other.data(), other.size(), static_cast<int>(kRemoteRw)),
            0)
      << std::strerror(errno);
  EXPECT_EQ(b_.mr->addr, other.data());
  EXPECT_EQ(b_.mr->length, other.size());
  std::memset(a_.buf.data(), 0x55, 100);
  EXPECT_EQ(write(addr_of(other.data() + 10), b_.mr->rkey, 100), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(other.data() + 10, a_.buf.data(), 100), 0);
  // The old buffer is no longer part of the region: writing it is out of bounds.
  EXPECT_EQ(write(addr_of(b_.buf.data()), b_.mr->rkey, 16), IBV_WC_REM_ACCESS_ERR);
  for (char ch : b_.buf) ASSERT_EQ(ch, 0);
  // Put it back so TearDown's dereg_mr concerns a live buffer (not required, but tidy).
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, b_.buf.data(),
                         b_.buf.size(), 0),
            0);
}

TEST_F(ReregTest, BadInputLeavesTheRegionAsItWas) {
  ibv_mr before = *b_.mr;
  ibv_context* other_ctx = a_.ctx;
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(b_.mr, 0, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_rereg_mr(b_.mr, 1 << 5, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_FLAGS_SUPPORTED << 1 | IBV_REREG_MR_CHANGE_ACCESS,
                         nullptr, nullptr, 0, static_cast<int>(kRemoteRw)),
            IBV_REREG_MR_ERR_INPUT);
  // A translation needs an address and a length.
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr, 64, 0),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, b_.buf.data(), 0, 0),
            IBV_REREG_MR_ERR_INPUT);
  // Access flags without CHANGE_ACCESS, a PD of another device, a missing PD.
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, b_.buf.data(), 64,
                         static_cast<int>(kRemoteRw)),
            IBV_REREG_MR_ERR_INPUT);
  ASSERT_NE(other_ctx, b_.ctx);
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_PD, a_.pd, nullptr, 0, 0),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_PD, nullptr, nullptr, 0, 0),
            IBV_REREG_MR_ERR_INPUT);
  // Unknown access bits, and remote write without local write (ibv_reg_mr(3)).
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, 1 << 15),
            IBV_REREG_MR_ERR_INPUT);
  errno = 0;
  EXPECT_EQ(
      ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_WRITE),
      IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(std::memcmp(&before, b_.mr, sizeof before), 0);
  // Still the same region with the same (no) remote rights.
  EXPECT_EQ(write(addr_of(b_.buf.data()), b_.mr->rkey, 8), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(ReregTest, ChangingThePdMovesItsReference) {
  ibv_pd* pd2 = ibv_alloc_pd(b_.ctx);
  ASSERT_NE(pd2, nullptr);
  ASSERT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_PD, pd2, nullptr, 0, 0), 0);
  EXPECT_EQ(b_.mr->pd, pd2);
  EXPECT_EQ(ibv_dealloc_pd(pd2), EBUSY);  // the region now uses it
  // Granting remote write while in pd2: b's QP is in the old PD, so the peer's write through it
  // is a protection-domain violation (reported as a remote access error).
  ASSERT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         static_cast<int>(kRemoteRw)),
            0);
  EXPECT_EQ(write(addr_of(b_.buf.data()), b_.mr->rkey, 8), IBV_WC_REM_ACCESS_ERR);
  ASSERT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_PD, b_.pd, nullptr, 0, 0), 0);
  EXPECT_EQ(b_.mr->pd, b_.pd);
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
}

TEST_F(ReregTest, ARegionWithABoundWindowIsBusy) {
  ibv_mw* mw = ibv_alloc_mw(b_.pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr) << std::strerror(errno);
  ibv_mw_bind bind{};
  bind.wr_id = 1;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info.mr = b_.mr;
  bind.bind_info.addr = addr_of(b_.buf.data());
  bind.bind_info.length = 64;
  bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(ibv_bind_mw(b_.qp, mw, &bind), 0) << std::strerror(errno);
  EXPECT_EQ(next(b_).status, IBV_WC_SUCCESS);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         static_cast<int>(kLocal)),
            IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EBUSY);
  // The window still works: the region was not changed.
  std::memset(a_.buf.data(), 0x66, 16);
  EXPECT_EQ(write(addr_of(b_.buf.data()), mw->rkey, 16), IBV_WC_SUCCESS);
  EXPECT_EQ(b_.buf[0], 0x66);
  ASSERT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         static_cast<int>(kLocal)),
            0);
}

TEST_F(ReregTest, CompletionTimestampsAreMonotonicNanoseconds) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(a_.ctx, nullptr, &attr), 0);
  EXPECT_EQ(attr.hca_core_clock, 1000000u);  // kHz: a 1 GHz clock
  EXPECT_EQ(attr.completion_timestamp_mask, ~uint64_t{0});
  ASSERT_EQ(ibv_rereg_mr(b_.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         static_cast<int>(kRemoteRw)),
            0);
  timespec t0{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const uint64_t start = static_cast<uint64_t>(t0.tv_sec) * 1000000000u + t0.tv_nsec;
  constexpr int kWrites = 5;
  for (int i = 0; i < kWrites; ++i) post_write(addr_of(b_.buf.data()), b_.mr->rkey, 32, i);
  uint64_t prev = 0;
  for (int i = 0; i < kWrites; ++i) {
    Completion c = next(a_);
    ASSERT_TRUE(c.got);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.wr_id, static_cast<uint64_t>(i));
    EXPECT_NE(c.ts, 0u);
    EXPECT_GE(c.ts, prev);
    EXPECT_GE(c.ts, start);  // taken after the work was posted
    prev = c.ts;
    // Wall clock of the same instant: within a few seconds of now.
    const uint64_t now = static_cast<uint64_t>(time(nullptr)) * 1000000000u;
    EXPECT_LT(c.wallclock_ns > now ? c.wallclock_ns - now : now - c.wallclock_ns, 5000000000ull);
  }
  timespec t1{};
  clock_gettime(CLOCK_MONOTONIC, &t1);
  EXPECT_LE(prev, static_cast<uint64_t>(t1.tv_sec) * 1000000000u + t1.tv_nsec);

  // ibv_query_rt_values_ex reads the same clock, so an application can relate timestamps to now.
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  ASSERT_EQ(ibv_query_rt_values_ex(a_.ctx, &v), 0);
  EXPECT_GE(static_cast<uint64_t>(v.raw_clock.tv_sec) * 1000000000u + v.raw_clock.tv_nsec, prev);
  v.comp_mask = IBV_VALUES_MASK_RESERVED;
  EXPECT_EQ(ibv_query_rt_values_ex(a_.ctx, &v), EINVAL);
}

}  // namespace
