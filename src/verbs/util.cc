// Object-free helpers of the libibverbs API: description strings, rate conversions and the fork
// support calls. They are exported so that a program linked against liburoce alone links and runs;
// under LD_PRELOAD they forward to the real libibverbs so that the output is exactly the system's.
#include <infiniband/verbs.h>

#include <cerrno>

#include "real.h"
#include "transport/static_rate.h"

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr auto& kRates = uroce::transport::kStaticRates;  // IBTA 9.11 / PortInfo static rates

}  // namespace

UROCE_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  if (auto f = UROCE_REAL(ibv_wc_status_str, "IBVERBS_1.1")) return f(status);
  switch (status) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    case IBV_WC_LOC_QP_OP_ERR:
      return "local QP operation error";
    case IBV_WC_LOC_EEC_OP_ERR:
      return "local EE context operation error";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_MW_BIND_ERR:
      return "memory management operation error";
    case IBV_WC_BAD_RESP_ERR:
      return "bad response error";
    case IBV_WC_LOC_ACCESS_ERR:
      return "local access error";
    case IBV_WC_REM_INV_REQ_ERR:
      return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_REM_OP_ERR:
      return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR retry counter exceeded";
    case IBV_WC_LOC_RDD_VIOL_ERR:
      return "local RDD violation error";
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return "remote invalid RD request";
    case IBV_WC_REM_ABORT_ERR:
      return "aborted error";
    case IBV_WC_INV_EECN_ERR:
      return "invalid EE context number";
    case IBV_WC_INV_EEC_STATE_ERR:
      return "invalid EE context state";
    case IBV_WC_FATAL_ERR:
      return "fatal error";
    case IBV_WC_RESP_TIMEOUT_ERR:
      return "response timeout error";
    case IBV_WC_GENERAL_ERR:
      return "general error";
    case IBV_WC_TM_ERR:
      return "TM error";
    case IBV_WC_TM_RNDV_INCOMPLETE:
      return "TM software rendezvous";
  }
  return "unknown";
}

UROCE_EXPORT const char* ibv_node_type_str(ibv_node_type t) {
  if (auto f = UROCE_REAL(ibv_node_type_str, "IBVERBS_1.1")) return f(t);
  switch (t) {
    case IBV_NODE_CA:
      return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH:
      return "InfiniBand switch";
    case IBV_NODE_ROUTER:
      return "InfiniBand router";
    case IBV_NODE_RNIC:
      return "iWARP NIC";
    case IBV_NODE_USNIC:
      return "usNIC";
    case IBV_NODE_USNIC_UDP:
      return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED:
      return "unspecified";
    default:
      return "unknown";
  }
}

UROCE_EXPORT const char* ibv_port_state_str(ibv_port_state s) {
  if (auto f = UROCE_REAL(ibv_port_state_str, "IBVERBS_1.1")) return f(s);
  switch (s) {
    case IBV_PORT_NOP:
      return "no state change (NOP)";
    case IBV_PORT_DOWN:
      return "down";
    case IBV_PORT_INIT:
      return "init";
    case IBV_PORT_ARMED:
      return "armed";
    case IBV_PORT_ACTIVE:
      return "active";
    case IBV_PORT_ACTIVE_DEFER:
      return "active defer";
  }
  return "unknown";
}

UROCE_EXPORT const char* ibv_event_type_str(ibv_event_type e) {
  if (auto f = UROCE_REAL(ibv_event_type_str, "IBVERBS_1.1")) return f(e);
  switch (e) {
    case IBV_EVENT_CQ_ERR:
      return "CQ error";
    case IBV_EVENT_QP_FATAL:
      return "local work queue catastrophic error";
    case IBV_EVENT_QP_REQ_ERR:
      return "invalid request local work queue error";
    case IBV_EVENT_QP_ACCESS_ERR:
      return "local access violation work queue error";
    case IBV_EVENT_COMM_EST:
      return "communication established";
    case IBV_EVENT_SQ_DRAINED:
      return "send queue drained";
    case IBV_EVENT_PATH_MIG:
      return "path migrated";
    case IBV_EVENT_PATH_MIG_ERR:
      return "path migration request error";
    case IBV_EVENT_DEVICE_FATAL:
      return "local catastrophic error";
    case IBV_EVENT_PORT_ACTIVE:
      return "port active";
    case IBV_EVENT_PORT_ERR:
      return "port error";
    case IBV_EVENT_LID_CHANGE:
      return "LID change";
    case IBV_EVENT_PKEY_CHANGE:
      return "P_Key change";
    case IBV_EVENT_SM_CHANGE:
      return "SM change";
    case IBV_EVENT_SRQ_ERR:
      return "SRQ catastrophic error";
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return "SRQ limit reached";
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return "last WQE reached";
    case IBV_EVENT_CLIENT_REREGISTER:
      return "client reregistration";
    case IBV_EVENT_GID_CHANGE:
      return "GID table change";
    case IBV_EVENT_WQ_FATAL:
      return "WQ fatal";
  }
  return "unknown";
}

UROCE_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  if (auto f = UROCE_REAL(ibv_rate_to_mult, "IBVERBS_1.0")) return f(rate);
  for (const auto& r : kRates)
    if (r.rate == rate && r.mult) return r.mult;
  return -1;
}

UROCE_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  if (auto f = UROCE_REAL(mult_to_ibv_rate, "IBVERBS_1.0")) return f(mult);
  for (const auto& r : kRates)
    if (r.mult == mult && r.mult) return r.rate;
  return IBV_RATE_MAX;
}

UROCE_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  if (auto f = UROCE_REAL(ibv_rate_to_mbps, "IBVERBS_1.1")) return f(rate);
  for (const auto& r : kRates)
    if (r.rate == rate) return r.mbps;
  return -1;
}

UROCE_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  if (auto f = UROCE_REAL(mbps_to_ibv_rate, "IBVERBS_1.1")) return f(mbps);
  for (const auto& r : kRates)
    if (r.mbps == mbps) return r.rate;
  return IBV_RATE_MAX;
}

// Fork support protects DMA-registered pages from copy-on-write. uroce's engine reaches memory
// with the CPU, so its regions need no protection; hardware devices in the same process still do.
UROCE_EXPORT int ibv_fork_init(void) {
  if (auto f = UROCE_REAL(ibv_fork_init, "IBVERBS_1.1")) return f();
  return 0;
}

UROCE_EXPORT ibv_fork_status ibv_is_fork_initialized(void) {
  if (auto f = UROCE_REAL(ibv_is_fork_initialized, "IBVERBS_1.13")) return f();
  return IBV_FORK_UNNEEDED;
}

UROCE_EXPORT int ibv_dontfork_range(void* base, size_t size) {
  if (auto f = UROCE_REAL(ibv_dontfork_range, "IBVERBS_1.1")) return f(base, size);
  return 0;
}

UROCE_EXPORT int ibv_dofork_range(void* base, size_t size) {
  if (auto f = UROCE_REAL(ibv_dofork_range, "IBVERBS_1.1")) return f(base, size);
  return 0;
}
