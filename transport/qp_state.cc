// The QP state transition table and attribute validation. The masks follow IBTA Vol. 1 ch. 10.3
// ("QP attributes by transition") as ibv_modify_qp(3) lists them; the Linux kernel keeps the same
// table in ib_modify_qp_is_ok().
#include "transport/qp_state.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "transport/env.h"
#include "transport/qp.h"
#include "transport/static_rate.h"

namespace uroce::transport {
namespace {

constexpr int kPathRc = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kPathUc = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
constexpr int kRtsRc =
    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
// Packet pacing is no IBTA attribute: as on ConnectX it may be set entering RTS and in RTS (the
// kernel's table allows it there; ibv_modify_qp_rate_limit modifies RTS to RTS).
constexpr int kPacing = IBV_QP_RATE_LIMIT;

// The same for XRC's halves (the kernel's ib_modify_qp_is_ok keeps them as columns of its own):
// the send (initiator) QP is RC's requester, the receive (target) QP RC's responder.
constexpr int kPathXrcIni = kPathUc;
constexpr int kPathXrcTgt = kPathRc;
constexpr int kRtsXrcTgt = IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;

// Index of a QP type in the per-type columns below: RC, UC, UD, XRC send, XRC receive.
int type_index(ibv_qp_type t) {
  switch (t) {
    case IBV_QPT_RC:
      return 0;
    case IBV_QPT_UC:
      return 1;
    case IBV_QPT_UD:
      return 2;
    case IBV_QPT_XRC_SEND:
      return 3;
    case IBV_QPT_XRC_RECV:
      return 4;
    default:
      return -1;
  }
}

constexpr int kTypes = 5;
struct Entry {
  bool valid;
  int required[kTypes];  // RC, UC, UD, XRC send, XRC receive
  int optional[kTypes];
};

constexpr int kNumStates = IBV_QPS_ERR + 1;  // RESET INIT RTR RTS SQD SQE ERR

// kTable[cur][next].
constexpr Entry make_table_entry(bool valid) {
  return Entry{valid, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}};
}

struct Table {
  Entry e[kNumStates][kNumStates];
  constexpr Table() : e{} {
    for (int s = 0; s < kNumStates; ++s) {
      // Any state may go to RESET, and any but RESET to ERR, with no other attribute (IBTA
      // 10.3.1, QP state diagram; the kernel's ib_modify_qp_is_ok() agrees).
      e[s][IBV_QPS_RESET] = make_table_entry(true);
      e[s][IBV_QPS_ERR] = make_table_entry(s != IBV_QPS_RESET);
    }
    constexpr int kInit = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    constexpr int kInitUd = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    e[IBV_QPS_RESET][IBV_QPS_INIT] = {true, {kInit, kInit, kInitUd, kInit, kInit}, {0, 0, 0, 0, 0}};
    e[IBV_QPS_INIT][IBV_QPS_INIT] = {true, {0, 0, 0, 0, 0}, {kInit, kInit, kInitUd, kInit, kInit}};
    e[IBV_QPS_INIT][IBV_QPS_RTR] = {
        true,
        {kPathRc, kPathUc, 0, kPathXrcIni, kPathXrcTgt},
        {IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
         IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX, IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
         IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
         IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX}};
    constexpr int kRtsOptRc = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                              IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
    constexpr int kRtsOptUc =
        IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
    e[IBV_QPS_RTR][IBV_QPS_RTS] = {
        true,
        {kRtsRc, IBV_QP_SQ_PSN, IBV_QP_SQ_PSN, kRtsRc, kRtsXrcTgt},
        {kRtsOptRc | kPacing, kRtsOptUc | kPacing, IBV_QP_CUR_STATE | IBV_QP_QKEY | kPacing,
         kRtsOptUc | kPacing, kRtsOptRc}};
    const Entry to_rts = {
        true,
        {0, 0, 0, 0, 0},
        {kRtsOptRc | kPacing, kRtsOptUc | kPacing, IBV_QP_CUR_STATE | IBV_QP_QKEY | kPacing,
         kRtsOptUc | kPacing, kRtsOptRc}};
    e[IBV_QPS_RTS][IBV_QPS_RTS] = to_rts;
    e[IBV_QPS_SQD][IBV_QPS_RTS] = to_rts;
    constexpr int kSqdNotify = IBV_QP_EN_SQD_ASYNC_NOTIFY;
    e[IBV_QPS_RTS][IBV_QPS_SQD] = {
        true, {0, 0, 0, 0, 0}, {kSqdNotify, kSqdNotify, kSqdNotify, kSqdNotify, kSqdNotify}};
    constexpr int kSqdCommon =
        IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE;
    e[IBV_QPS_SQD][IBV_QPS_SQD] = {
        true,
        {0, 0, 0, 0, 0},
        {kSqdCommon | IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
             IBV_QP_MIN_RNR_TIMER,
         kSqdCommon | IBV_QP_AV, IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
         kSqdCommon | IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
         kSqdCommon | IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_MAX_DEST_RD_ATOMIC |
             IBV_QP_MIN_RNR_TIMER}};
    // SQE exists for UC/UD only (an RC send error moves the QP to ERR); uroce never enters it,
    // but a QP told it is there may leave it as the table says.
    e[IBV_QPS_SQE][IBV_QPS_RTS] = {
        true,
        {0, 0, 0, 0, 0},
        {0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS, IBV_QP_CUR_STATE | IBV_QP_QKEY, 0, 0}};
  }
};
constexpr Table kTable;

// IBV_ACCESS_ON_DEMAND is a region's flag with no meaning for a QP, but programs that build one
// access mask for both pass it here (rdma-core's own test_odp does); mlx5 and rxe ignore it, so
// it is accepted and ignored.
constexpr int kAllowedQpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 IBV_ACCESS_ON_DEMAND;
// One physical port, one P_Key (the default 0xffff at index 0), as the device reports.
constexpr uint8_t kPortNum = 1;
constexpr uint16_t kNumPkeys = 1;

// The first attribute of `mask` whose value is unacceptable: its bit and why; {0, nullptr} when
// every value is fine.
struct BadValue {
  int attr = 0;
  const char* why = nullptr;
};
BadValue check_values(const ibv_qp_attr& a, int mask, bool ipv6) {
  if ((mask & IBV_QP_PORT) && a.port_num != kPortNum) return {IBV_QP_PORT, "port_num must be 1"};
  if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index >= kNumPkeys)
    return {IBV_QP_PKEY_INDEX, "pkey_index must be 0 (one P_Key)"};
  if ((mask & IBV_QP_ACCESS_FLAGS) && (a.qp_access_flags & ~kAllowedQpAccess))
    return {IBV_QP_ACCESS_FLAGS,
            "qp_access_flags has a flag other than LOCAL_WRITE, "
            "REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC"};
  if ((mask & IBV_QP_PATH_MTU) &&
      (stored_int(a.path_mtu) < IBV_MTU_256 || stored_int(a.path_mtu) > IBV_MTU_4096))
    return {IBV_QP_PATH_MTU, "path_mtu is not an ibv_mtu (IBV_MTU_256..IBV_MTU_4096)"};
  if ((mask & IBV_QP_DEST_QPN) && a.dest_qp_num > 0xffffff)
    return {IBV_QP_DEST_QPN, "dest_qp_num is wider than 24 bits"};
  if ((mask & IBV_QP_TIMEOUT) && a.timeout > 31) return {IBV_QP_TIMEOUT, "timeout above 31"};
  if ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > 7) return {IBV_QP_RETRY_CNT, "retry_cnt above 7"};
  if ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > 7) return {IBV_QP_RNR_RETRY, "rnr_retry above 7"};
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31)
    return {IBV_QP_MIN_RNR_TIMER, "min_rnr_timer above 31"};
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > kMaxRdAtomic)
    return {IBV_QP_MAX_QP_RD_ATOMIC, "max_rd_atomic above the device's max_qp_init_rd_atom"};
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > kMaxRdAtomic)
    return {IBV_QP_MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic above the device's max_qp_rd_atom"};
  if ((mask & IBV_QP_RATE_LIMIT) && a.rate_limit != 0 &&
      (a.rate_limit < kMinRateLimitKbps || a.rate_limit > kMaxRateLimitKbps))
    return {IBV_QP_RATE_LIMIT, "rate_limit outside packet_pacing_caps (1 kbit/s .. 100 Gbit/s)"};
  // No automatic path migration: there is one path, always "migrated" (IBTA 17.2.8).
  if (mask & IBV_QP_ALT_PATH) return {IBV_QP_ALT_PATH, "no alternate path (one port, one path)"};
  if ((mask & IBV_QP_PATH_MIG_STATE) && stored_int(a.path_mig_state) != IBV_MIG_MIGRATED)
    return {IBV_QP_PATH_MIG_STATE, "path_mig_state must be IBV_MIG_MIGRATED (one path)"};
  if (mask & IBV_QP_AV) {
    // RoCE addresses by GID only (Annex A16/A17): the AH must carry a GRH whose DGID is an
    // address of the device's own family (its sockets reach no other): IPv4-mapped from an IPv4
    // device, a plain IPv6 unicast one from an IPv6 device.
    if (!a.ah_attr.is_global) return {IBV_QP_AV, "ah_attr.is_global is 0: RoCE needs the GRH"};
    const wire::IpAddr dgid = wire::IpAddr::from_bytes(a.ah_attr.grh.dgid.raw);
    if (!ipv6 && !dgid.is_v4())
      return {IBV_QP_AV, "ah_attr.grh.dgid is not an IPv4-mapped GID (::ffff:a.b.c.d)"};
    if (ipv6 && (dgid.is_v4() || dgid == wire::IpAddr{} || dgid.bytes()[0] == 0xff))
      return {IBV_QP_AV, "ah_attr.grh.dgid is not an IPv6 unicast GID (the device is IPv6)"};
    if (a.ah_attr.port_num > kPortNum) return {IBV_QP_AV, "ah_attr.port_num must be 0 or 1"};
    if (static_rate_mbps(a.ah_attr.static_rate) < 0)
      return {IBV_QP_AV, "ah_attr.static_rate is not an ibv_rate"};
  }
  return {};
}

}  // namespace

TransitionMasks transition_masks(ibv_qp_type type, ibv_qp_state cur, ibv_qp_state next) {
  const int t = type_index(type);
  if (t < 0 || cur < 0 || cur >= kNumStates || next < 0 || next >= kNumStates) return {};
  const Entry& e = kTable.e[cur][next];
  return {e.valid, e.required[t], e.optional[t]};
}

int xrc_effective_mask(ibv_qp_type type, int mask) {
  // As the kernel's modify_qp_mask (uverbs_cmd.c) before ib_modify_qp_is_ok: programs pass RC's
  // masks to both halves of XRC (perftest -c XRC does), and each half ignores the attributes of
  // the other.
  if (type == IBV_QPT_XRC_SEND) return mask & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (type == IBV_QPT_XRC_RECV)
    return mask & ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
  return mask;
}

ModifyCheck check_modify(ibv_qp_type type, ibv_qp_state cur, const ibv_qp_attr& attr, int mask,
                         bool ipv6) {
  mask = xrc_effective_mask(type, mask);
  ModifyCheck r;
  r.err = EINVAL;
  const auto refuse = [&r](const char* why, int attrs) {
    r.why = why;
    r.attrs = attrs;
    return r;
  };
  if (mask & IBV_QP_CUR_STATE) {
    // The caller's view of the current state must match ours (IBTA 11.2.5.2: "the current state
    // is an optional input"; a mismatch is an invalid modifier).
    if (stored_int(attr.cur_qp_state) != cur)
      return refuse("cur_qp_state is not the QP's current state", IBV_QP_CUR_STATE);
  }
  const int next_value = (mask & IBV_QP_STATE) ? stored_int(attr.qp_state) : int(cur);
  if (type_index(type) < 0) return refuse("the transport has no such QP type", 0);
  if (next_value < 0 || next_value >= kNumStates)
    return refuse("qp_state is not an ibv_qp_state", IBV_QP_STATE);
  const auto next = static_cast<ibv_qp_state>(next_value);
  const TransitionMasks m = transition_masks(type, cur, next);
  if (!m.valid) return refuse("no such transition for this QP type (IBTA 10.3.1)", 0);
  if ((mask & m.required) != m.required)
    return refuse("required attribute(s) missing from the mask", m.required & ~mask);
  if (const int extra = mask & ~(m.required | m.optional | IBV_QP_STATE); extra != 0)
    return refuse("attribute(s) this transition does not take", extra);
  if (const BadValue b = check_values(attr, mask, ipv6); b.why != nullptr)
    return refuse(b.why, b.attr);
  r.err = 0;
  r.next = next;
  return r;
}

std::string attr_mask_to_string(int mask) {
  static constexpr struct {
    int bit;
    const char* name;
  } kNames[] = {
      {IBV_QP_STATE, "IBV_QP_STATE"},
      {IBV_QP_CUR_STATE, "IBV_QP_CUR_STATE"},
      {IBV_QP_EN_SQD_ASYNC_NOTIFY, "IBV_QP_EN_SQD_ASYNC_NOTIFY"},
      {IBV_QP_ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"},
      {IBV_QP_PKEY_INDEX, "IBV_QP_PKEY_INDEX"},
      {IBV_QP_PORT, "IBV_QP_PORT"},
      {IBV_QP_QKEY, "IBV_QP_QKEY"},
      {IBV_QP_AV, "IBV_QP_AV"},
      {IBV_QP_PATH_MTU, "IBV_QP_PATH_MTU"},
      {IBV_QP_TIMEOUT, "IBV_QP_TIMEOUT"},
      {IBV_QP_RETRY_CNT, "IBV_QP_RETRY_CNT"},
      {IBV_QP_RNR_RETRY, "IBV_QP_RNR_RETRY"},
      {IBV_QP_RQ_PSN, "IBV_QP_RQ_PSN"},
      {IBV_QP_MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"},
      {IBV_QP_ALT_PATH, "IBV_QP_ALT_PATH"},
      {IBV_QP_MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"},
      {IBV_QP_SQ_PSN, "IBV_QP_SQ_PSN"},
      {IBV_QP_MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"},
      {IBV_QP_PATH_MIG_STATE, "IBV_QP_PATH_MIG_STATE"},
      {IBV_QP_CAP, "IBV_QP_CAP"},
      {IBV_QP_DEST_QPN, "IBV_QP_DEST_QPN"},
      {IBV_QP_RATE_LIMIT, "IBV_QP_RATE_LIMIT"},
  };
  std::string out;
  int rest = mask;
  for (const auto& n : kNames) {
    if (!(mask & n.bit)) continue;
    if (!out.empty()) out += '|';
    out += n.name;
    rest &= ~n.bit;
  }
  if (rest != 0) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%#x", static_cast<unsigned>(rest));
    if (!out.empty()) out += '|';
    out += hex;
  }
  return out.empty() ? "0" : out;
}

const char* to_string(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RESET:
      return "RESET";
    case IBV_QPS_INIT:
      return "INIT";
    case IBV_QPS_RTR:
      return "RTR";
    case IBV_QPS_RTS:
      return "RTS";
    case IBV_QPS_SQD:
      return "SQD";
    case IBV_QPS_SQE:
      return "SQE";
    case IBV_QPS_ERR:
      return "ERR";
    default:
      return "UNKNOWN";
  }
}

uint32_t mtu_bytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
    default:
      return 0;
  }
}

uint64_t ack_timeout_ns(uint8_t timeout) {
  if (timeout == 0) return kNever;
  // 4.096 us * 2^timeout = 4096 ns << timeout; timeout <= 31 keeps this below 2^44.
  return uint64_t{4096} << (timeout & 31);
}

uint64_t rnr_timer_ns(uint8_t code) {
  // IBTA Table 45, in units of 10 us: code 0 means 655.36 ms, codes 1..31 grow by ~1.5x/1.33x.
  static constexpr uint32_t kTens[32] = {65536, 1,    2,    3,     4,     6,     8,     12,
                                         16,    24,   32,   48,    64,    96,    128,   192,
                                         256,   384,  512,  768,   1024,  1536,  2048,  3072,
                                         4096,  6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return uint64_t{kTens[code & 31]} * 10'000;
}

}  // namespace uroce::transport
