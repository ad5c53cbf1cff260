// The verbs uroce implements, as entry.cc calls them once it knows an object is uroce's. Each
// returns what the public verb returns (see entry.cc for the errno conventions of each verb) and
// never throws.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "uroce/uroce.h"

namespace uroce::transport {
struct SrqInit;
}

namespace uroce::verbs {

class VDevice;

// ibv_query_port@IBVERBS_1.1 fills only rdma-core's 48-byte compat struct, which ends right
// before port_cap_flags2 (asserted in objects.h).
inline constexpr size_t kCompatPortAttrBytes = 48;

// rdma-core's verbs that return an error number leave it in errno too: returns `rc`, and sets
// errno when it is a (positive) error number (entry.cc).
inline int with_errno(int rc) {
  if (rc > 0) errno = rc;
  return rc;
}

// ---- registry.cc: the uroce devices of this process ----
// Reads the configuration once (UROCE_DEVICES); a bad value is reported on stderr and leaves no
// uroce devices. Devices live until the process exits.
const std::vector<VDevice*>& devices();
// True when `dev` is a uroce device. Cheap and safe on any pointer a libibverbs user may hold;
// false before the first ibv_get_device_list (no uroce object can exist yet).
bool is_uroce(const ibv_device* dev);
inline bool is_uroce(const ibv_context* ctx) {
  return ctx && is_uroce(ctx->device);
}

// Called at exit (atexit) before the devices still open drain: the CM's goodbyes
// (CmService::at_exit) go out in that drain. One hook; set once by the CM.
void set_before_drain(void (*fn)());

const char* device_name(ibv_device* dev);
__be64 device_guid(ibv_device* dev);
int device_index(ibv_device* dev);

// ---- context.cc ----
ibv_context* open_device(ibv_device* dev);
// True when `fd` is (a duplicate of) the cmd_fd of a uroce context, in this process or another:
// such a context cannot be imported (ibv_import_device reports EOPNOTSUPP).
bool is_context_fd(int fd);
int close_device(ibv_context* ctx);
int get_async_event(ibv_context* ctx, ibv_async_event* ev);
// uroce_query_counters (uroce/uroce.h): fills up to `max`, returns the number of counters.
int query_counters(ibv_context* ctx, uroce_counter* out, int max);
void ack_async_event(ibv_async_event* ev);
// The object an async event names: which member of ibv_async_event's `element` is set, by the
// event's type (ibv_get_async_event(3)); kNone for port and device events.
enum class EventElement { kNone, kCq, kQp, kSrq, kWq };
EventElement event_element(ibv_event_type type);

// ---- query.cc ----
int query_device(ibv_context* ctx, ibv_device_attr* attr);
int query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* in, ibv_device_attr_ex* attr,
                    size_t attr_size);
// Writes at most `attr_size` bytes of *attr (the compat entry point passes 48).
int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t attr_size);
int query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid);  // 0 or errno
int query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                 uint32_t flags, size_t entry_size);  // 0 or errno
ssize_t query_gid_table(ibv_context* ctx, ibv_gid_entry* entries, size_t max_entries,
                        uint32_t flags, size_t entry_size);  // count or -errno
// rdma-core's private enum ibv_gid_type_sysfs: RoCE v1 (and IB) = 0, RoCE v2 = 1.
int query_gid_type_sysfs(ibv_context* ctx, uint8_t port, unsigned index, int* type);
int query_pkey(ibv_context* ctx, uint8_t port, int index, __be16* pkey);  // 0 or errno
int get_pkey_index(ibv_context* ctx, uint8_t port, __be16 pkey);          // index or -1

// ---- memory.cc ----
ibv_pd* alloc_pd(ibv_context* ctx);
int dealloc_pd(ibv_pd* pd);
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access);
int dereg_mr(ibv_mr* mr);
// ibv_advise_mr(3) on on-demand regions: 0 or an errno value.
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge);
// 0 or an enum ibv_rereg_mr_err_code value (errno set); keys are kept.
int rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access);

// ---- mw.cc: memory windows (ibv_context_ops alloc_mw, dealloc_mw, bind_mw) ----
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
// Frees the windows a closing context still holds (before its MRs and PDs).
void destroy_context_mws(class VContext* ctx);

// ---- cq.cc ----
ibv_comp_channel* create_comp_channel(ibv_context* ctx);
int destroy_comp_channel(ibv_comp_channel* ch);
ibv_cq* create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch,
                  int comp_vector);
ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr);
// ibv_query_rt_values_ex: the raw clock of completion timestamps.
int query_rt_values(ibv_context* ctx, ibv_values_ex* values);
int destroy_cq(ibv_cq* cq);
int resize_cq(ibv_cq* cq, int cqe);
int get_cq_event(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context);
void ack_cq_events(ibv_cq* cq, unsigned n);
int poll_cq(ibv_cq* cq, int n, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

// ---- qp.cc ----
ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
// The fields ibv_qp_init_attr and ibv_qp_init_attr_ex share, copied from one to the other (the
// rest of `To` zero): ibv_create_qp served by the _ex path, and back.
template <class To, class From>
To shared_init_attr(const From& f) {
  To t{};
  t.qp_context = f.qp_context;
  t.send_cq = f.send_cq;
  t.recv_cq = f.recv_cq;
  t.srq = f.srq;
  t.cap = f.cap;
  t.qp_type = f.qp_type;
  t.sq_sig_all = f.sq_sig_all;
  return t;
}
int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask);
int modify_qp_rate_limit(ibv_qp* qp, ibv_qp_rate_limit_attr* attr);
int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init);
int destroy_qp(ibv_qp* qp);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
ibv_qp_ex* qp_to_qp_ex(ibv_qp* qp);

// ---- srq.cc: shared receive queues ----
// Each returns what the public verb returns: NULL with errno, or a positive errno.
// `xrc`: the domain, PD and CQ of an XRC SRQ (create_srq_ex), else null.
ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr, const transport::SrqInit* xrc = nullptr);
ibv_srq* create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr);  // verbs_context op
int modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask);
int query_srq(ibv_srq* srq, ibv_srq_attr* attr);
int destroy_srq(ibv_srq* srq);
// Frees an SRQ its context still has when it closes (destroy_context_objects).
void destroy_srq_object(class VSrq* srq);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad);  // ibv_context_ops

// Fills the ibv_qp an application sees of `qp` (whose transport QP exists): context, number,
// handle, state, type, its mutex and condition variable (qp.cc).
void init_qp_abi(class VQp* qp, ibv_context* ctx, void* qp_context, ibv_qp_type type,
                 ibv_qp_state state);

// ---- xrc.cc: XRC domains, XRC SRQ numbers, XRC receive QPs ----
// The verbs_context ops: NULL with errno, or a positive errno.
ibv_xrcd* open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* attr);
int close_xrcd(ibv_xrcd* xrcd);
int get_srq_num(ibv_srq* srq, uint32_t* srq_num);
ibv_qp* open_qp(ibv_context* ctx, ibv_qp_open_attr* attr);
// ibv_create_qp_ex of an IBV_QPT_XRC_RECV QP (qp.cc hands it over).
ibv_qp* create_xrc_recv_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
// Closes an XRC receive QP's handle (ibv_destroy_qp); the QP goes with its last handle.
void close_tgt_handle(class VQp* qp);
// Closes the XRC domain handles a context still has (close_device).
void destroy_context_xrcds(class VContext* ctx);

// ---- wr_api.cc: the ibv_wr_* send interface ----
// 0 when every operation in `send_ops_flags` (IBV_QP_EX_WITH_*) can be posted (its row in
// transport/wr_opcode.h is supported), else EOPNOTSUPP.
int check_send_ops(uint64_t send_ops_flags, ibv_qp_type type = IBV_QPT_RC);
// ibv_wr_set_xrc_srqn for XRC send QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.
void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t remote_srqn);
// Installs the wr_* function pointers of the operations asked for.
void init_send_ops(class VQp* qp, uint64_t send_ops_flags);

// Releases everything a context still owns (used by close_device).
void destroy_context_objects(class VContext* ctx);

}  // namespace uroce::verbs
