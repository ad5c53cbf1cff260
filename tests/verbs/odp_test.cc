// On-demand paging through the verbs API, as an application uses it: odp_caps in
// ibv_query_device_ex, regions registered with IBV_ACCESS_ON_DEMAND over pages never touched (or
// not mapped at all), the implicit region (ibv_reg_mr(pd, NULL, SIZE_MAX, …)), ibv_advise_mr, and
// what a bad access becomes: a remote access error for the peer, a local protection error for a
// local SGE — never a signal in the process that holds the memory. This binary links liburoce
// directly and connects two uroce devices on loopback addresses of its own (127.0.25.x).
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "verbs_test_util.h"

namespace {

constexpr const char* kDevices = "uroce0=127.0.25.1,uroce1=127.0.25.2";

const auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new uroce::test::DevicesEnv(kDevices));
using uroce::test::poll_n;

constexpr size_t kPage = 4096;
constexpr unsigned kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

uint64_t addr_of(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

class OdpTest : public ::testing::Test {
 protected:
  using Side = uroce::test::RcSide;

  void SetUp() override {
    open_side(a_, "uroce0");
    open_side(b_, "uroce1");
    if (HasFatalFailure()) return;
    ibv_device_attr_ex ex{};
    ASSERT_EQ(ibv_query_device_ex(a_.ctx, nullptr, &ex), 0);
    // uroce offers ODP where the kernel can fault pages in without touching them (Linux 5.14).
    if (ex.odp_caps.general_caps == 0) GTEST_SKIP() << "no on-demand paging on this host";
    uroce::test::connect_pair(
        a_, b_,
        {.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC});
    // b's on-demand memory: four pages, none touched yet; the second a hole (no access at all:
    // PROT_NONE rather than unmapped, because an unmapped page may be mapped again by the next
    // mmap of any thread — ASan's allocator did, and the "hole" was readable), the third
    // read-only.
    void* p = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    mem_ = static_cast<uint8_t*>(p);
    ASSERT_EQ(mprotect(mem_ + kPage, kPage, PROT_NONE), 0);
    ASSERT_EQ(mprotect(mem_ + 2 * kPage, kPage, PROT_READ), 0);
    odp_ = ibv_reg_mr(b_.pd, mem_, 4 * kPage, kRemote | IBV_ACCESS_ON_DEMAND);
    ASSERT_NE(odp_, nullptr) << std::strerror(errno);
  }

  void TearDown() override {
    if (odp_) {
      EXPECT_EQ(ibv_dereg_mr(odp_), 0);
    }
    if (mem_) munmap(mem_, 4 * kPage);
    for (Side* s : {&a_, &b_}) {
      if (s->ctx) uroce::test::close_rc(*s);
    }
  }

  void open_side(Side& s, const char* name) {
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(s, name, kRemote));
    ASSERT_NO_FATAL_FAILURE(uroce::test::create_rc_qp(s));
  }

  // One RDMA operation of a's buffer [0, len) against `raddr` under `rkey`; its completion.
  ibv_wc rdma(ibv_wr_opcode op, uint64_t raddr, uint32_t rkey, uint32_t len) {
    ibv_sge sge{addr_of(a_.buf.data()), len, a_.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = raddr;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = 1;
    } else {
      wr.wr.rdma.remote_addr = raddr;
      wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
    auto wcs = poll_n(a_.scq, 1);
    EXPECT_EQ(wcs.size(), 1u);
    return wcs.empty() ? ibv_wc{} : wcs[0];
  }

  Side a_, b_;
  uint8_t* mem_ = nullptr;
  ibv_mr* odp_ = nullptr;
};

TEST_F(OdpTest, DeviceReportsOnDemandPagingForEveryOperation) {
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(a_.ctx, nullptr, &ex), 0);
  EXPECT_EQ(ex.odp_caps.general_caps, uint64_t{IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT});
  const uint32_t rc = ex.odp_caps.per_transport_caps.rc_odp_caps;
  for (uint32_t cap : {IBV_ODP_SUPPORT_SEND, IBV_ODP_SUPPORT_RECV, IBV_ODP_SUPPORT_WRITE,
                       IBV_ODP_SUPPORT_READ, IBV_ODP_SUPPORT_ATOMIC, IBV_ODP_SUPPORT_SRQ_RECV})
    EXPECT_TRUE(rc & cap) << cap;
  EXPECT_EQ(ex.odp_caps.per_transport_caps.ud_odp_caps,
            uint32_t{IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV});
  EXPECT_EQ(ex.xrc_odp_caps, rc);  // XRC reaches memory as RC does
}

TEST_F(OdpTest, WriteReadAndAtomicReachPagesNeverTouched) {
  std::memset(a_.buf.data(), 0x3c, 256);
  ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, addr_of(mem_ + 512), odp_->rkey, 256);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(mem_[512], 0x3c);
  EXPECT_EQ(mem_[767], 0x3c);
  EXPECT_EQ(mem_[768], 0);
  // A READ of the last page (untouched: the kernel's zero page until now).
  wc = rdma(IBV_WR_RDMA_READ, addr_of(mem_ + 3 * kPage), odp_->rkey, 128);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(a_.buf[0], 0);
  // The read-only page can be read.
  wc = rdma(IBV_WR_RDMA_READ, addr_of(mem_ + 2 * kPage), odp_->rkey, 64);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  const uint64_t before = 41;
  std::memcpy(mem_ + 3 * kPage + 8, &before, 8);
  wc = rdma(IBV_WR_ATOMIC_FETCH_AND_ADD, addr_of(mem_ + 3 * kPage + 8), odp_->rkey, 8);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  uint64_t fetched = 0, after = 0;
  std::memcpy(&fetched, a_.buf.data(), 8);
  std::memcpy(&after, mem_ + 3 * kPage + 8, 8);
  EXPECT_EQ(fetched, 41u);
  EXPECT_EQ(after, 42u);
}

// A WRITE into the hole: the responder NAKs it (remote access error) and its process lives on.
TEST_F(OdpTest, WriteIntoAPageWithNoAccessIsARemoteAccessError) {
  ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, addr_of(mem_ + kPage + 100), odp_->rkey, 64);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc.status);
}

TEST_F(OdpTest, WriteIntoAReadOnlyPageIsARemoteAccessError) {
  ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, addr_of(mem_ + 2 * kPage), odp_->rkey, 64);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc.status);
}

TEST_F(OdpTest, ReadAcrossTheHoleIsARemoteAccessError) {
  ibv_wc wc = rdma(IBV_WR_RDMA_READ, addr_of(mem_ + kPage - 32), odp_->rkey, 64);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc.status);
}

// A SEND whose local SGE lies in the hole of the sender's own on-demand region: a local
// protection error on the sender, nothing sent.
TEST_F(OdpTest, SendFromALocalPageWithNoAccessIsALocalProtectionError) {
  ibv_mr* local = ibv_reg_mr(a_.pd, mem_, 4 * kPage, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(local, nullptr) << std::strerror(errno);
  uroce::test::post_recv_at(b_.qp, b_, 5, 0, 256);
  ibv_sge sge{addr_of(mem_ + kPage), 64, local->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  auto wcs = poll_n(a_.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(wcs[0].status);
  EXPECT_TRUE(poll_n(b_.rcq, 1, 100).empty());
  EXPECT_EQ(ibv_dereg_mr(local), 0);
}

// The implicit region: one key for the whole address space; any mapped buffer is reached at its
// own address, an unmapped one is refused.
TEST_F(OdpTest, ImplicitRegionCoversTheWholeAddressSpace) {
  ibv_mr* all = ibv_reg_mr(b_.pd, nullptr, SIZE_MAX, kRemote | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(all, nullptr) << std::strerror(errno);
  EXPECT_EQ(all->length, SIZE_MAX);
  std::vector<uint8_t> heap(1000, 0);
  std::memset(a_.buf.data(), 0x77, 100);
  ibv_wc wc = rdma(IBV_WR_RDMA_WRITE, addr_of(heap.data() + 10), all->rkey, 100);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(heap[10], 0x77);
  EXPECT_EQ(heap[109], 0x77);
  EXPECT_EQ(heap[110], 0);
  // Address 0 is never mapped.
  wc = rdma(IBV_WR_RDMA_READ, 0, all->rkey, 8);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(ibv_dereg_mr(all), 0);
}

TEST_F(OdpTest, RegistrationFlags) {
  // HUGETLB is a hint for explicit on-demand regions only; the implicit region has no address.
  ibv_mr* huge = ibv_reg_mr(b_.pd, mem_, kPage, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB);
  EXPECT_NE(huge, nullptr) << std::strerror(errno);
  if (huge) {
    EXPECT_EQ(ibv_dereg_mr(huge), 0);
  }
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(b_.pd, mem_, kPage, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(b_.pd, nullptr, SIZE_MAX, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB),
            nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Without the flag, NULL/SIZE_MAX is no region.
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(b_.pd, nullptr, SIZE_MAX, int{IBV_ACCESS_LOCAL_WRITE}), nullptr);
  EXPECT_NE(errno, 0);
}

// A region without ON_DEMAND must be there when registered, as an RNIC pins it: mapped, and
// writable if it may be written. Else EFAULT at once, instead of a signal at the first receive or
// remote WRITE into it.
TEST_F(OdpTest, RegionsNotOnDemandMustBeMappedWhenRegistered) {
  for (size_t off : {kPage, kPage - 64}) {  // the hole; a range that reaches into it
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(b_.pd, mem_ + off, 128, int{IBV_ACCESS_LOCAL_WRITE}), nullptr) << off;
    EXPECT_EQ(errno, EFAULT);
  }
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(b_.pd, mem_ + 2 * kPage, kPage, int{IBV_ACCESS_LOCAL_WRITE}), nullptr);
  EXPECT_EQ(errno, EFAULT);
  // Read-only memory may be registered for reading (a SEND's source, a remote READ).
  ibv_mr* ro = ibv_reg_mr(b_.pd, mem_ + 2 * kPage, kPage, int{IBV_ACCESS_REMOTE_READ});
  ASSERT_NE(ro, nullptr) << std::strerror(errno);
  // Nor can a region be moved onto the hole, or given write access to read-only pages; it stays
  // as it was.
  EXPECT_EQ(ibv_rereg_mr(ro, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(ibv_rereg_mr(ro, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, mem_ + kPage, kPage, 0),
            IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(ro->addr, mem_ + 2 * kPage);
  ibv_wc wc = rdma(IBV_WR_RDMA_READ, addr_of(mem_ + 2 * kPage), ro->rkey, 64);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(ibv_dereg_mr(ro), 0);
}

TEST_F(OdpTest, AdviseMrPrefetchesOnDemandRangesAndSaysWhatItCannot) {
  ibv_sge first{addr_of(mem_), static_cast<uint32_t>(kPage), odp_->lkey};
  EXPECT_EQ(ibv_advise_mr(b_.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
                          &first, 1),
            0);
  EXPECT_EQ(ibv_advise_mr(b_.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &first, 1), 0);
  // The hole cannot be faulted in; the read-only page not for writing.
  ibv_sge hole{addr_of(mem_ + kPage), 64, odp_->lkey};
  ibv_sge ro{addr_of(mem_ + 2 * kPage), 64, odp_->lkey};
  EXPECT_EQ(ibv_advise_mr(b_.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &hole, 1),
            EFAULT);
  EXPECT_EQ(ibv_advise_mr(b_.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &ro, 1),
            0);
  EXPECT_EQ(
      ibv_advise_mr(b_.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &ro, 1),
      EFAULT);
  // NO_FAULT asks only for pages already present: nothing to refuse.
  EXPECT_EQ(ibv_advise_mr(b_.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &hole, 1), 0);
  // A region that is not on demand, out of bounds, an unknown flag or advice.
  ibv_sge pinned{addr_of(b_.buf.data()), 64, b_.mr->lkey};
  EXPECT_EQ(ibv_advise_mr(b_.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pinned, 1), EFAULT);
  ibv_sge beyond{addr_of(mem_ + 3 * kPage), static_cast<uint32_t>(kPage + 1), odp_->lkey};
  EXPECT_EQ(ibv_advise_mr(b_.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &beyond, 1), EFAULT);
  EXPECT_EQ(ibv_advise_mr(b_.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x80, &first, 1), EINVAL);
  EXPECT_EQ(ibv_advise_mr(b_.pd, static_cast<ibv_advise_mr_advice>(9), 0, &first, 1), EOPNOTSUPP);
}

}  // namespace
