// The verbs objects of a run: the device, one buffer and memory region, one CQ per thread, the
// QPs and their addresses, and the one place work requests are posted (ibv_wr_* by default, as
// perftest on devices that have it; ibv_post_send with --use_old_post_send).
//
// Plain <infiniband/verbs.h>: the same code drives uroce (under uroce-run), rxe and RNICs.
//
// Buffer layout (perftest's, so the addresses a peer sees mean the same): for QP i of n, region
// i is its local one (the source of SENDs and WRITEs, the sink of READs and atomic results) and
// region n + i its target (what the QP's rkey/vaddr in the key message name: the peer WRITEs,
// READs and updates atomically there). Each region is max(largest message, page size) rounded
// up to the cache line. SEND tests add receive slots per QP after the regions.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tools/perf/options.h"
#include "tools/perf/setup.h"

namespace uroce::perf {

// perftest's Q_Key for UD (perftest_resources.h DEFF_QKEY), so UD QPs of the two interoperate.
inline constexpr uint32_t kQkey = 0x11111111;
// RNR NAK timer the receiving side asks for (IBTA table 45: 12 = 0.64 ms), as perftest.
inline constexpr uint8_t kMinRnrTimer = 12;

[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// The work-request opcode of a test's operation. What follows from it (the QP's send-ops flag,
// whether it may go inline, whether it is a READ/atomic limited by -o) comes from its row in the
// transport's opcode table (transport/wr_opcode.h).
ibv_wr_opcode test_opcode(Verb v, AtomicOp a);

// What a port says about itself, and the GID the run uses.
struct DeviceInfo {
  std::string name;
  ibv_device_attr attr{};
  ibv_port_attr port{};
  bool ethernet = false;  // link layer Ethernet (RoCE): a GID is required
  int gid_index = -1;     // -1: no GID (IB link layer without -x)
  ibv_gid gid{};
  ibv_transport_type transport = IBV_TRANSPORT_IB;
};

// One QP and everything the data path needs about it.
struct QpCtx {
  int index = 0;   // 0 .. qps-1 across all threads
  int thread = 0;  // the worker that drives it
  ibv_qp* qp = nullptr;
  ibv_qp_ex* qpx = nullptr;  // the ibv_wr_* handle; nullptr with --use_old_post_send
  ibv_ah* ah = nullptr;      // UD: the peer's address
  Dest local, remote;
  uint8_t* src = nullptr;     // local region
  uint8_t* target = nullptr;  // target region (the peer's window into this side)
  uint8_t* recv = nullptr;    // receive slots (SEND tests)
  size_t recv_slot_size = 0;
  int recv_slots = 0;
  uint32_t lkey = 0;
  int sq_depth = 0;  // the QP's max_send_wr
  int rq_depth = 0;  // the QP's max_recv_wr
  // Send queue accounting, owned by the QP's worker and kept across runs (sizes), so that
  // unsignaled WRs one run leaves behind still count against the queue in the next:
  uint64_t sq_posted = 0;      // WRs posted
  uint64_t sq_done = 0;        // WRs known complete (a signaled CQE covers the ones before it)
  uint32_t sq_unsignaled = 0;  // posted since the last signaled one
};

// One polling thread's completion queue (and channel with -e).
struct CqCtx {
  ibv_cq* cq = nullptr;
  ibv_comp_channel* channel = nullptr;
  unsigned unacked_events = 0;  // ibv_get_cq_event results not yet acknowledged
};

// A work request as the data path describes it; post() turns it into the chosen API's form.
struct SendWr {
  uint64_t wr_id = 0;
  uint64_t local_addr = 0;
  uint32_t length = 0;
  bool signaled = false;
  uint64_t remote_addr = 0;  // WRITE/READ/atomic target
  uint64_t compare_add = 0;  // atomics: the add value, or the compare value
  uint64_t swap = 0;         // CMP_AND_SWAP
};

class Resources {
 public:
  // Opens the device (-d, or the first) and picks the GID. Ends the process with a message if
  // there is none or it cannot be used.
  explicit Resources(const Options& o);
  ~Resources();
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;

  const DeviceInfo& info() const { return info_; }
  // The MTU this side offers: -m (not above the port's active MTU), else the active MTU.
  ibv_mtu local_mtu() const;

  // Allocates the buffer (regions for the largest message of the run, at least `cycle_buffer`
  // each), registers it, creates the CQs and QPs and moves the QPs to INIT. `out_reads` is the
  // responder depth this side offers (READ/atomic tests).
  void create(uint64_t max_msg, uint32_t cycle_buffer, uint32_t cache_line);
  // Moves every QP to RTR and RTS against the peer's coordinates (and makes UD address handles).
  void connect(const std::vector<Dest>& remote, ibv_mtu mtu);

  int num_qps() const { return static_cast<int>(qps_.size()); }
  QpCtx& qp(int i) { return qps_[static_cast<size_t>(i)]; }
  CqCtx& cq(int thread) { return cqs_[static_cast<size_t>(thread)]; }
  size_t region_size() const { return region_; }
  bool uses_gid() const { return info_.gid_index >= 0; }
  bool new_post_api() const { return new_api_; }
  int out_reads() const { return out_reads_; }

  // Posts `n` work requests of the test's operation on `q` in one call. Returns 0 or an errno.
  int post(QpCtx& q, const SendWr* wrs, int n);
  // Posts one receive into slot `slot` of `q` (wr_id names the QP and slot).
  int post_recv(QpCtx& q, int slot);

 private:
  ibv_qp* create_qp(CqCtx& cq, int sq, int rq, bool* new_api);
  void modify_init(ibv_qp* qp);

  const Options& o_;
  const ibv_wr_opcode opcode_;  // test_opcode(o_.verb, o_.atomic_op)
  DeviceInfo info_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  uint8_t* buf_ = nullptr;
  size_t buf_len_ = 0;
  size_t region_ = 0;
  bool new_api_ = false;
  int out_reads_ = 1;
  std::vector<CqCtx> cqs_;
  std::vector<QpCtx> qps_;
  // ibv_post_send's form, reused for every post (one list per QP would also do; posts on a QP
  // come from one thread, and each thread posts on its own QPs only, so one per QP it is).
  struct OldWr {
    std::vector<ibv_send_wr> wr;
    std::vector<ibv_sge> sge;
  };
  std::vector<OldWr> old_wr_;
};

// wr_id layout shared by the data path: QP index in the high 32 bits, a tag in bits 24..31 and
// a 24-bit value (a receive slot, or how many WRs a signaled completion covers).
enum class WrTag : uint8_t { kSend = 1, kRecv = 2 };
inline uint64_t make_wr_id(int qp, WrTag tag, uint32_t value) {
  return uint64_t(uint32_t(qp)) << 32 | uint64_t(uint8_t(tag)) << 24 | (value & 0xffffff);
}
inline int wr_qp(uint64_t id) {
  return static_cast<int>(id >> 32);
}
inline WrTag wr_tag(uint64_t id) {
  return static_cast<WrTag>((id >> 24) & 0xff);
}
inline uint32_t wr_value(uint64_t id) {
  return static_cast<uint32_t>(id & 0xffffff);
}

}  // namespace uroce::perf
