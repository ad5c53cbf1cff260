// Per-QP counters: one row per counter in UROCE_QP_COUNTERS — the field and the name it is
// published under (`uroce stats`, UROCE_STATS, the shared-memory file of engine/stats_shm.h) —
// from which the struct, the listing (for_each_qp_counter) and the sums over QPs (operator+=) are
// derived, as Linux rxe keeps one name list for its hw_counters. Names follow rxe's hw_counters
// where one exists (the "qp_" prefix keeps three apart from the device counters of the same name)
// and mlx5's for congestion control. The rows are in the order they are listed.
//
// Writers: the QP's roles, under the device lock (the QP's caller serialises them).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

// X(field, published name)
#define UROCE_QP_COUNTERS(X)                                                                     \
  X(sent_pkts, "qp_sent_pkts") /* packets sent: requests, responses, ACKs, CNPs, resends */      \
  X(rcvd_pkts, "qp_rcvd_pkts") /* packets the QP accepted */                                     \
  X(retransmitted_pkts, "retransmitted_pkts")                                                    \
  /* Times a loss signal (sequence/implicit NAK, ACK timeout, probe) shrank the requester's */   \
  /* send window (requester.h, SendWindowCtl). No rxe equivalent. */                             \
  X(send_window_cuts, "send_window_cuts")                                                        \
  /* Probe timeouts that resent from the oldest unacknowledged PSN before the ACK timeout */     \
  /* (QpInit::early_retransmit, completer.h). No rxe equivalent. */                              \
  X(early_retransmits, "early_retransmits")                                                      \
  X(local_ack_timeout_err, "local_ack_timeout_err")                                              \
  X(rcvd_seq_err, "rcvd_seq_err") /* PSN sequence error NAKs received */                         \
  X(rcvd_rnr_err, "rcvd_rnr_err") /* RNR NAKs received */                                        \
  X(send_rnr_err, "send_rnr_err") /* RNR NAKs sent (no receive WQE) */                           \
  /* Messages that found no receive WQE and waited for one instead of an RNR NAK at once */      \
  /* (QpInit::rnr_grace_ns, qp.cc). No rxe equivalent. */                                        \
  X(rnr_waits, "rnr_waits")                                                                      \
  /* Requests dropped because the packets waiting behind such a message filled their */          \
  /* bound; the requester resends them, as after a switch buffer overflow. */                    \
  X(rnr_wait_drops, "rnr_wait_drops")                                                            \
  X(out_of_seq_request, "out_of_seq_request") /* requests received out of sequence (NAK sent) */ \
  X(duplicate_request, "duplicate_request")   /* duplicate requests received (re-ACKed) */       \
  X(retry_exceeded_err, "retry_exceeded_err")                                                    \
  X(rnr_retry_exceeded_err, "rnr_retry_exceeded_err")                                            \
  X(completer_retry_err, "completer_retry_err")                                                  \
  X(send_err, "send_err")                                                                        \
  /* Received but dropped (wrong state, bad opcode for the QP type...). */                       \
  X(dropped_pkts, "qp_dropped_pkts")                                                             \
  /* UD/UC receive drops, each also counted in dropped_pkts. */                                  \
  /* UD: the DETH's Q_Key differs from the QP's (IBTA C10-15, 10.2.5). */                        \
  X(qkey_violation, "qkey_violation")                                                            \
  /* UD/UC: no receive WQE posted (mlx5's name): the message is dropped. */                      \
  X(out_of_buffer, "out_of_buffer")                                                              \
  /* UC: messages abandoned after a lost packet (IBTA 9.8.3). */                                 \
  X(uc_dropped_msgs, "uc_dropped_msgs")                                                          \
  /* Congestion control, mlx5's names (docs/congestion-control.md, "Counters"). */               \
  /* Accepted packets that arrived marked CE. */                                                 \
  X(np_ecn_marked_roce_packets, "np_ecn_marked_roce_packets")                                    \
  /* CNPs sent (at most one per min_time_between_cnps). */                                       \
  X(np_cnp_sent, "np_cnp_sent")                                                                  \
  /* CNPs received that the rate control acted on (DCQCN). */                                    \
  X(rp_cnp_handled, "rp_cnp_handled")                                                            \
  /* CNPs received and ignored: no DCQCN on this QP, or it is not sending. */                    \
  X(rp_cnp_ignored, "rp_cnp_ignored")

namespace uroce::transport {

struct QpCounters {
#define UROCE_QP_COUNTER_FIELD(field, name) uint64_t field = 0;
  UROCE_QP_COUNTERS(UROCE_QP_COUNTER_FIELD)
#undef UROCE_QP_COUNTER_FIELD

  // Adds every counter of `o`: totals over a device's QPs, live and destroyed.
  QpCounters& operator+=(const QpCounters& o) {
#define UROCE_QP_COUNTER_ADD(field, name) field += o.field;
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
#define UROCE_QP_COUNTER_VISIT(field, name) f(name, q.field);
  UROCE_QP_COUNTERS(UROCE_QP_COUNTER_VISIT)
#undef UROCE_QP_COUNTER_VISIT
}

#define UROCE_QP_COUNTER_ONE(field, name) +1
inline constexpr size_t kQpCounterCount = 0 UROCE_QP_COUNTERS(UROCE_QP_COUNTER_ONE);
#undef UROCE_QP_COUNTER_ONE
static_assert(sizeof(QpCounters) == kQpCounterCount * sizeof(uint64_t),
              "every field of QpCounters is a row of UROCE_QP_COUNTERS");

}  // namespace uroce::transport
