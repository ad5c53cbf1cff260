// The IBTA QP state machine (Vol. 1 ch. 10.3.1, Table "QP state transition properties"): which
// transitions exist, which attributes each requires or allows per QP type, and which attribute
// values are acceptable. Pure functions; qp.cc applies the transition.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace uroce::transport {

struct ModifyCheck {
  int err = 0;                        // 0 or EINVAL
  ibv_qp_state next = IBV_QPS_RESET;  // the state to enter when err == 0
  // When err != 0: why, as a static phrase ("required attribute missing", "port_num must be 1",
  // …), and the attribute mask bits it is about (0 when it is about the transition itself), for
  // the log line that tells the user which attribute was refused.
  const char* why = nullptr;
  int attrs = 0;
};

// Packet pacing (IBV_QP_RATE_LIMIT, ibv_modify_qp_rate_limit; ConnectX's, not the IBTA's): a
// QP's send rate in kbit/s on the wire, 0 for none. The device reports the range in
// packet_pacing_caps.
inline constexpr uint32_t kMinRateLimitKbps = 1;
inline constexpr uint32_t kMaxRateLimitKbps = 100'000'000;  // 100 Gbit/s

// Validates `mask` and the values it selects for a QP of `type` now in `cur` (ibv_modify_qp(3)).
// Without IBV_QP_STATE the transition is cur → cur. IBV_QP_CUR_STATE, when given, must name the
// current state and is only accepted where the table allows it.
// The attributes of `mask` a QP of `type` takes: all of them, but for XRC's halves those of the
// other half are dropped (the kernel's modify_qp_mask). check_modify applies it first.
int xrc_effective_mask(ibv_qp_type type, int mask);
// `ipv6`: the QP's device address is IPv6, so an AV's DGID must be an IPv6 GID (not
// IPv4-mapped); else it must be IPv4-mapped. A device reaches its own family only.
ModifyCheck check_modify(ibv_qp_type type, ibv_qp_state cur, const ibv_qp_attr& attr, int mask,
                         bool ipv6 = false);

// The attribute masks of one transition for one QP type.
struct TransitionMasks {
  bool valid = false;
  int required = 0;  // besides IBV_QP_STATE
  int optional = 0;
};
TransitionMasks transition_masks(ibv_qp_type type, ibv_qp_state cur, ibv_qp_state next);

const char* to_string(ibv_qp_state s);

// The value a C caller stored in an enum field of ibv_qp_attr (qp_state, cur_qp_state, path_mtu,
// path_mig_state). C lets any int stand there; in C++ loading one outside the enum's range as the
// enum is undefined (UBSan's -fsanitize=enum; found by tests/fuzz/fuzz_modify_qp), so such fields
// are checked as the ints they are before anything reads them as enums.
template <typename E>
int stored_int(const E& field) {
  static_assert(sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}
// The names of the IBV_QP_* bits of `mask`, "IBV_QP_SQ_PSN|IBV_QP_TIMEOUT" (unknown bits in hex).
std::string attr_mask_to_string(int mask);

// Path MTU in bytes for an ibv_mtu value (IBV_MTU_256..IBV_MTU_4096), or 0 if invalid.
uint32_t mtu_bytes(ibv_mtu mtu);

// Time units of the QP attributes. Local ACK timeout: 4.096 us * 2^timeout, 0 = infinite
// (IBTA 9.7.6.1.3, C9-140); returns kNever for 0.
uint64_t ack_timeout_ns(uint8_t timeout);
// RNR NAK timer field (IBTA Table 45, the encoding of min_rnr_timer): nanoseconds.
uint64_t rnr_timer_ns(uint8_t code);

}  // namespace uroce::transport
