// Per-QP counters: one row per counter in UROCE_QP_COUNTERS — the field, the name it is
// published under (`uroce stats`, UROCE_STATS, the shared-memory file of engine/stats_shm.h) and
// its kind — from which the struct, the listing (for_each_qp_counter, kQpCounterInfo) and the
// sums over QPs (operator+=) are derived, as Linux rxe keeps one name list for its hw_counters.
// Names follow rxe's hw_counters where one exists (the "qp_" prefix keeps five apart from the
// device counters of the same name) and mlx5's otherwise (congestion control, out_of_sequence,
// implied_nak_seq_err). The rows are in the order they are listed; docs/troubleshooting.md ("Per
// QP") maps each to the rxe and mlx5 counter it corresponds to.
//
// Writers: the QP's roles, under the device lock (the QP's caller serialises them). Each is a
// plain increment of a field of the QP the writer already works on.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

// X(field, published name, kind): kind says what `uroce top` makes of a row (QpCounterKind):
// traffic is what it sorts by traffic, error what it sums into its error column and sorts by
// errors, info the rest.
#define UROCE_QP_COUNTERS(X)                                                                       \
  /* Packets sent: requests, responses, ACKs, CNPs, resends; and their IB bytes (BTH .. pad, */    \
  /* without the ICRC: what the transport built, whatever framing the port adds). */               \
  X(sent_pkts, "qp_sent_pkts", kTraffic)                                                           \
  X(rcvd_pkts, "qp_rcvd_pkts", kTraffic) /* packets the QP accepted */                             \
  X(sent_bytes, "qp_sent_bytes", kTraffic)                                                         \
  X(rcvd_bytes, "qp_rcvd_bytes", kTraffic) /* of the packets counted in rcvd_pkts */               \
  /* Request packets sent again (go-back-N after a NAK, a timeout, a probe; RNR resends). */       \
  X(retransmitted_pkts, "retransmitted_pkts", kError)                                              \
  /* Times a loss signal (sequence/implicit NAK, ACK timeout, probe) shrank the requester's */     \
  /* send window (requester.h, SendWindowCtl). No rxe equivalent. */                               \
  X(send_window_cuts, "send_window_cuts", kInfo)                                                   \
  /* Probe timeouts that resent from the oldest unacknowledged PSN before the ACK timeout */       \
  /* (QpInit::early_retransmit, completer.h). No rxe equivalent. */                                \
  X(early_retransmits, "early_retransmits", kInfo)                                                 \
  X(local_ack_timeout_err, "local_ack_timeout_err", kError) /* ACK timer expiries (9.7.6.1.3) */   \
  X(rcvd_seq_err, "rcvd_seq_err", kError)                   /* PSN sequence error NAKs received */ \
  /* Responses that showed earlier READ/ATOMIC responses lost, answered by resending from the */   \
  /* first missing PSN (IBTA 9.7.5.1.1 implicit NAK; completer.cc implicit_nak), mlx5's name. */   \
  X(implied_nak_seq_err, "implied_nak_seq_err", kError)                                            \
  X(rcvd_rnr_err, "rcvd_rnr_err", kError) /* RNR NAKs received */                                  \
  X(send_rnr_err, "send_rnr_err", kError) /* RNR NAKs sent (no receive WQE) */                     \
  /* Messages that found no receive WQE and waited for one instead of an RNR NAK at once */        \
  /* (QpInit::rnr_grace_ns, qp.cc). No rxe equivalent. */                                          \
  X(rnr_waits, "rnr_waits", kInfo)                                                                 \
  /* Requests dropped because the packets waiting behind such a message filled their */            \
  /* bound; the requester resends them, as after a switch buffer overflow. */                      \
  X(rnr_wait_drops, "rnr_wait_drops", kError)                                                      \
  /* Sequence error NAKs sent: one per gap in the request PSNs (rxe counts the same). */           \
  X(out_of_seq_request, "out_of_seq_request", kError)                                              \
  /* Request packets received ahead of the expected PSN, every one of them (each dropped; */       \
  /* the first of a gap draws the NAK counted above), mlx5's name. */                              \
  X(out_of_sequence, "out_of_sequence", kError)                                                    \
  X(duplicate_request, "duplicate_request", kError) /* duplicate requests received */              \
  X(retry_exceeded_err, "retry_exceeded_err", kError)                                              \
  X(retry_rnr_exceeded_err, "retry_rnr_exceeded_err", kError)                                      \
  /* Resends begun (timeout, sequence or implicit NAK): rxe's name, not an error by itself. */     \
  X(completer_retry_err, "completer_retry_err", kInfo)                                             \
  X(send_err, "send_err", kError)                                                                  \
  /* Received but dropped (wrong state, bad opcode for the QP type...). */                         \
  X(dropped_pkts, "qp_dropped_pkts", kError)                                                       \
  /* UD/UC receive drops, each also counted in dropped_pkts. */                                    \
  /* UD: the DETH's Q_Key differs from the QP's (IBTA C10-15, 10.2.5). */                          \
  X(qkey_violation, "qkey_violation", kInfo)                                                       \
  /* UD/UC: no receive WQE posted (mlx5's name): the message is dropped. */                        \
  X(out_of_buffer, "out_of_buffer", kInfo)                                                         \
  /* UC: messages abandoned after a lost packet (IBTA 9.8.3). */                                   \
  X(uc_dropped_msgs, "uc_dropped_msgs", kError)                                                    \
  /* XRC receive QPs: requests naming no XRC SRQ of the QP's domain here (NAK invalid request). */ \
  X(xrc_srq_invalid, "xrc_srq_invalid", kError)                                                    \
  /* Congestion control, mlx5's names (docs/congestion-control.md, "Counters"). */                 \
  /* Accepted packets that arrived marked CE. */                                                   \
  X(np_ecn_marked_roce_packets, "np_ecn_marked_roce_packets", kInfo)                               \
  /* CNPs sent (at most one per min_time_between_cnps). */                                         \
  X(np_cnp_sent, "np_cnp_sent", kInfo)                                                             \
  /* CNPs received that the rate control acted on (DCQCN). */                                      \
  X(rp_cnp_handled, "rp_cnp_handled", kInfo)                                                       \
  /* CNPs received and ignored: no DCQCN on this QP, or it is not sending. */                      \
  X(rp_cnp_ignored, "rp_cnp_ignored", kInfo)                                                       \
  /* Selective repeat (QpInit::selective_repeat, docs/selective-repeat.md). No rxe equivalent. */  \
  /* Responder: WRITE packets accepted and placed ahead of the expected PSN. */                    \
  X(sr_ooo_accepted, "sr_ooo_accepted", kInfo)                                                     \
  /* Responder: SACKs sent (a sequence NAK naming the first missing and one received PSN). */      \
  X(sr_sack_sent, "sr_sack_sent", kInfo)                                                           \
  /* Requester: SACKs received. */                                                                 \
  X(sr_sack_rcvd, "sr_sack_rcvd", kInfo)                                                           \
  /* Requester: packets resent for a hole below a SACKed PSN (also in retransmitted_pkts). */      \
  X(sr_selective_resends, "sr_selective_resends", kInfo)                                           \
  /* Requester: READ response packets placed ahead of a missing one (only the hole is asked). */   \
  X(sr_read_placed, "sr_read_placed", kInfo)                                                       \
  /* Multipath (QpInit::paths > 1, transport/multipath.h): WRITE packets sprayed over the */       \
  /* QP's paths, and paths given a new UDP source port after one of their packets was lost. */     \
  X(mp_sprayed_pkts, "mp_sprayed_pkts", kInfo)                                                     \
  X(mp_path_rotations, "mp_path_rotations", kInfo)                                                 \
  /* Multipath: paths given a new UDP source port because the peer's CNP named them (marked). */   \
  X(mp_ecn_rotations, "mp_ecn_rotations", kInfo)                                                   \
  /* ACKs that arrived riding on the peer's requests (transport/ack_rider.h): each one an ACK */   \
  /* packet the peer did not send. No rxe equivalent. */                                           \
  X(ack_riders_rcvd, "ack_riders_rcvd", kInfo)

namespace uroce::transport {

// What a counter measures, for views that rank QPs (`uroce top`).
enum class QpCounterKind : uint8_t {
  kTraffic,  // packets and bytes moved
  kError,    // a loss, a refusal or a failure: each one is worth a look
  kInfo,     // the rest: events of normal operation, details of a counter above
};

struct QpCounters {
#define UROCE_QP_COUNTER_FIELD(field, name, kind) uint64_t field = 0;
  UROCE_QP_COUNTERS(UROCE_QP_COUNTER_FIELD)
#undef UROCE_QP_COUNTER_FIELD

  // Adds every counter of `o`: totals over a device's QPs, live and destroyed.
  QpCounters& operator+=(const QpCounters& o) {
#define UROCE_QP_COUNTER_ADD(field, name, kind) field += o.field;
    UROCE_QP_COUNTERS(UROCE_QP_COUNTER_ADD)
#undef UROCE_QP_COUNTER_ADD
    return *this;
  }
};

// Calls f(published name, value) for every counter of `q`, in the list's order; the value is
// writable when `q` is (tests set every counter without naming it).
template <typename Counters, typename F>
requires std::same_as<std::remove_cvref_t<Counters>, QpCounters>
void for_each_qp_counter(Counters&& q, F&& f) {
#define UROCE_QP_COUNTER_VISIT(field, name, kind) f(name, q.field);
  UROCE_QP_COUNTERS(UROCE_QP_COUNTER_VISIT)
#undef UROCE_QP_COUNTER_VISIT
}

#define UROCE_QP_COUNTER_ONE(field, name, kind) +1
inline constexpr size_t kQpCounterCount = 0 UROCE_QP_COUNTERS(UROCE_QP_COUNTER_ONE);
#undef UROCE_QP_COUNTER_ONE
static_assert(sizeof(QpCounters) == kQpCounterCount * sizeof(uint64_t),
              "every field of QpCounters is a row of UROCE_QP_COUNTERS");

// Each row's published name and kind, in the list's order.
struct QpCounterInfo {
  const char* name;
  QpCounterKind kind;
};
inline constexpr QpCounterInfo kQpCounterInfo[kQpCounterCount] = {
#define UROCE_QP_COUNTER_INFO(field, name, kind) {name, QpCounterKind::kind},
    UROCE_QP_COUNTERS(UROCE_QP_COUNTER_INFO)
#undef UROCE_QP_COUNTER_INFO
};

// A packet the QP handed to the port, or accepted: ib_bytes is its IB length (BTH .. pad,
// without the ICRC). Every place that sends or accepts counts through these, so packets and
// bytes agree.
inline void count_sent(QpCounters& c, uint64_t ib_bytes) {
  ++c.sent_pkts;
  c.sent_bytes += ib_bytes;
}
inline void count_rcvd(QpCounters& c, uint64_t ib_bytes) {
  ++c.rcvd_pkts;
  c.rcvd_bytes += ib_bytes;
}

}  // namespace uroce::transport
