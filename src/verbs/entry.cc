// The public libibverbs entry points liburoce defines, each at libibverbs' own symbol version
// (liburoce.map), so that under LD_PRELOAD they interpose on the system libibverbs and a program
// linked against liburoce alone finds them too.
//
// Each entry point decides whose object it was given (obj->context->device, provider.h): uroce
// objects go to the provider, everything else to the real libibverbs through UROCE_REAL. The real
// library calls some of its own exports through the PLT, so those calls arrive here as well and
// must be forwarded exactly. A verb uroce does not implement reports EOPNOTSUPP for uroce objects
// (docs/verbs.md lists them).
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "ah.h"
#include "provider.h"
#include "real.h"
#include "uroce/uroce.h"

// verbs.h turns these into inline wrappers; the exported functions are defined under their own
// names here.
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

// Private to rdma-core (driver.h), imported by ibv_devinfo: RoCE v1 = 0, RoCE v2 = 1.
extern "C" int ibv_query_gid_type(struct ibv_context* context, uint8_t port_num, unsigned int index,
                                  int* type);

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace uv = uroce::verbs;

namespace {

constexpr const char* V1_0 = "IBVERBS_1.0";
constexpr const char* V1_1 = "IBVERBS_1.1";
constexpr const char* V1_5 = "IBVERBS_1.5";
constexpr const char* V1_6 = "IBVERBS_1.6";
constexpr const char* V1_7 = "IBVERBS_1.7";
constexpr const char* V1_8 = "IBVERBS_1.8";
constexpr const char* V1_9 = "IBVERBS_1.9";
constexpr const char* V1_10 = "IBVERBS_1.10";
constexpr const char* V1_11 = "IBVERBS_1.11";
constexpr const char* V1_12 = "IBVERBS_1.12";
constexpr const char* V1_13 = "IBVERBS_1.13";
constexpr const char* V1_14 = "IBVERBS_1.14";
constexpr const char* VPRIV = "IBVERBS_PRIVATE_34";

// rdma-core's verbs that return an error number also leave it in errno (the failing uverbs
// command set it; providers' own checks follow suit), and programs print strerror(errno) after
// a failed call as often as the return value: uroce's failures do both (uv::with_errno).
using uv::with_errno;

// No real libibverbs to forward a foreign object to (liburoce linked directly).
template <typename T>
T* no_real_ptr() {
  errno = ENOSYS;
  return nullptr;
}

// Device lists handed out that contain uroce devices, and the real list each one wraps (null
// when the real library had none), for ibv_free_device_list.
std::mutex g_lists_mu;
std::unordered_map<ibv_device**, ibv_device**> g_lists;

}  // namespace

// ---- devices ------------------------------------------------------------------------------------

UROCE_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  int nreal = 0;
  ibv_device** real = nullptr;
  int real_errno = 0;
  if (auto f = UROCE_REAL(ibv_get_device_list, V1_1)) {
    real = f(&nreal);
    if (!real) {
      // Without kernel RDMA support the real call fails (ENOSYS here); that must not hide uroce.
      real_errno = errno;
      nreal = 0;
    }
  }
  const auto& ours = uv::devices();
  if (ours.empty()) {
    if (real || real_errno) {
      if (num_devices) *num_devices = nreal;
      if (!real) errno = real_errno;
      return real;
    }
  }
  size_t n = static_cast<size_t>(nreal) + ours.size();
  auto** list = static_cast<ibv_device**>(std::calloc(n + 1, sizeof(ibv_device*)));
  if (!list) {
    if (real) UROCE_REAL(ibv_free_device_list, V1_1)(real);
    errno = ENOMEM;
    return nullptr;
  }
  // Real devices first: uroce devices are appended (docs/architecture.md).
  for (int i = 0; i < nreal; ++i) list[i] = real[i];
  for (size_t i = 0; i < ours.size(); ++i)
    list[static_cast<size_t>(nreal) + i] = reinterpret_cast<ibv_device*>(ours[i]);
  {
    std::lock_guard<std::mutex> g(g_lists_mu);
    g_lists.emplace(list, real);
  }
  if (num_devices) *num_devices = static_cast<int>(n);
  return list;
}

UROCE_EXPORT void ibv_free_device_list(ibv_device** list) {
  ibv_device** real = nullptr;
  bool ours = false;
  {
    std::lock_guard<std::mutex> g(g_lists_mu);
    auto it = g_lists.find(list);
    if (it != g_lists.end()) {
      ours = true;
      real = it->second;
      g_lists.erase(it);
    }
  }
  if (ours) {
    if (real) UROCE_REAL(ibv_free_device_list, V1_1)(real);
    std::free(list);
    return;
  }
  if (auto f = UROCE_REAL(ibv_free_device_list, V1_1)) f(list);
}

UROCE_EXPORT const char* ibv_get_device_name(ibv_device* dev) {
  if (uv::is_uroce(dev)) return uv::device_name(dev);
  auto f = UROCE_REAL(ibv_get_device_name, V1_1);
  return f ? f(dev) : no_real_ptr<const char>();
}

UROCE_EXPORT __be64 ibv_get_device_guid(ibv_device* dev) {
  if (uv::is_uroce(dev)) return uv::device_guid(dev);
  auto f = UROCE_REAL(ibv_get_device_guid, V1_1);
  return f ? f(dev) : 0;
}

UROCE_EXPORT int ibv_get_device_index(ibv_device* dev) {
  if (uv::is_uroce(dev)) return uv::device_index(dev);
  auto f = UROCE_REAL(ibv_get_device_index, V1_9);
  return f ? f(dev) : -1;
}

UROCE_EXPORT ibv_context* ibv_open_device(ibv_device* dev) {
  if (uv::is_uroce(dev)) return uv::open_device(dev);
  auto f = UROCE_REAL(ibv_open_device, V1_1);
  return f ? f(dev) : no_real_ptr<ibv_context>();
}

UROCE_EXPORT int ibv_close_device(ibv_context* ctx) {
  if (uv::is_uroce(ctx)) return with_errno(uv::close_device(ctx));
  auto f = UROCE_REAL(ibv_close_device, V1_1);
  return f ? f(ctx) : ENOSYS;
}

UROCE_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  // Only kernel uverbs contexts can be imported: a uroce context lives in its process's memory.
  if (uv::is_context_fd(cmd_fd)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto f = UROCE_REAL(ibv_import_device, V1_10);
  return f ? f(cmd_fd) : no_real_ptr<ibv_context>();
}

UROCE_EXPORT int ibv_get_async_event(ibv_context* ctx, ibv_async_event* ev) {
  if (uv::is_uroce(ctx)) return uv::get_async_event(ctx, ev);
  auto f = UROCE_REAL(ibv_get_async_event, V1_1);
  if (!f) {
    errno = ENOSYS;
    return -1;
  }
  return f(ctx, ev);
}

UROCE_EXPORT void ibv_ack_async_event(ibv_async_event* ev) {
  const ibv_context* ctx = nullptr;
  switch (uv::event_element(ev->event_type)) {
    case uv::EventElement::kCq:
      ctx = ev->element.cq->context;
      break;
    case uv::EventElement::kQp:
      ctx = ev->element.qp->context;
      break;
    case uv::EventElement::kSrq:
      ctx = ev->element.srq->context;
      break;
    case uv::EventElement::kWq:
      ctx = ev->element.wq->context;
      break;
    case uv::EventElement::kNone:
      break;  // device and port events carry no object: acknowledging them touches nothing
  }
  if (ctx && uv::is_uroce(ctx)) return uv::ack_async_event(ev);
  if (auto f = UROCE_REAL(ibv_ack_async_event, V1_1)) f(ev);
}

// ---- queries ------------------------------------------------------------------------------------

UROCE_EXPORT int ibv_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  if (uv::is_uroce(ctx)) return with_errno(uv::query_device(ctx, attr));
  auto f = UROCE_REAL(ibv_query_device, V1_1);
  return f ? f(ctx, attr) : ENOSYS;
}

UROCE_EXPORT int ibv_query_port(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr) {
  // The 1.1 entry point fills only the compat struct (48 bytes): the inline ibv_query_port
  // reaches uroce through verbs_context::query_port with the full size instead.
  if (uv::is_uroce(ctx))
    return with_errno(uv::query_port(ctx, port, reinterpret_cast<ibv_port_attr*>(attr),
                                     uv::kCompatPortAttrBytes));
  auto f = UROCE_REAL(ibv_query_port, V1_1);
  return f ? f(ctx, port, attr) : ENOSYS;
}

UROCE_EXPORT int ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  if (uv::is_uroce(ctx)) {
    int rc = uv::query_gid(ctx, port, index, gid);
    if (rc) {
      errno = rc;
      return -1;  // libibverbs returns -1 for a failed GID query
    }
    return 0;
  }
  auto f = UROCE_REAL(ibv_query_gid, V1_1);
  if (!f) {
    errno = ENOSYS;
    return -1;
  }
  return f(ctx, port, index, gid);
}

UROCE_EXPORT int _ibv_query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index,
                                   ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (uv::is_uroce(ctx))
    return with_errno(uv::query_gid_ex(ctx, port, index, entry, flags, entry_size));
  auto f = UROCE_REAL(_ibv_query_gid_ex, V1_11);
  return f ? f(ctx, port, index, entry, flags, entry_size) : ENOSYS;
}

UROCE_EXPORT ssize_t _ibv_query_gid_table(ibv_context* ctx, ibv_gid_entry* entries,
                                          size_t max_entries, uint32_t flags, size_t entry_size) {
  if (uv::is_uroce(ctx)) {
    const ssize_t n = uv::query_gid_table(ctx, entries, max_entries, flags, entry_size);
    if (n < 0) errno = static_cast<int>(-n);
    return n;
  }
  auto f = UROCE_REAL(_ibv_query_gid_table, V1_11);
  return f ? f(ctx, entries, max_entries, flags, entry_size) : -ENOSYS;
}

UROCE_EXPORT int ibv_query_gid_type(ibv_context* ctx, uint8_t port, unsigned int index, int* type) {
  if (uv::is_uroce(ctx)) {
    int rc = uv::query_gid_type_sysfs(ctx, port, index, type);
    if (rc) {
      errno = rc;
      return -1;
    }
    return 0;
  }
  auto f = UROCE_REAL(ibv_query_gid_type, VPRIV);
  if (!f) {
    errno = ENOSYS;
    return -1;
  }
  return f(ctx, port, index, type);
}

UROCE_EXPORT int ibv_query_pkey(ibv_context* ctx, uint8_t port, int index, __be16* pkey) {
  if (uv::is_uroce(ctx)) {
    int rc = uv::query_pkey(ctx, port, index, pkey);
    if (rc) {
      errno = rc;
      return -1;
    }
    return 0;
  }
  auto f = UROCE_REAL(ibv_query_pkey, V1_1);
  if (!f) {
    errno = ENOSYS;
    return -1;
  }
  return f(ctx, port, index, pkey);
}

UROCE_EXPORT int ibv_get_pkey_index(ibv_context* ctx, uint8_t port, __be16 pkey) {
  if (uv::is_uroce(ctx)) return uv::get_pkey_index(ctx, port, pkey);
  auto f = UROCE_REAL(ibv_get_pkey_index, V1_5);
  return f ? f(ctx, port, pkey) : -1;
}

// ---- protection domains and memory regions --------------------------------------------------

UROCE_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  if (uv::is_uroce(ctx)) return uv::alloc_pd(ctx);
  auto f = UROCE_REAL(ibv_alloc_pd, V1_1);
  return f ? f(ctx) : no_real_ptr<ibv_pd>();
}

UROCE_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  if (uv::is_uroce(pd->context)) return with_errno(uv::dealloc_pd(pd));
  auto f = UROCE_REAL(ibv_dealloc_pd, V1_1);
  return f ? f(pd) : ENOSYS;
}

UROCE_EXPORT ibv_pd* ibv_import_pd(ibv_context* ctx, uint32_t handle) {
  if (uv::is_uroce(ctx)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto f = UROCE_REAL(ibv_import_pd, V1_10);
  return f ? f(ctx, handle) : no_real_ptr<ibv_pd>();
}

UROCE_EXPORT void ibv_unimport_pd(ibv_pd* pd) {
  if (uv::is_uroce(pd->context)) return;  // never imported
  if (auto f = UROCE_REAL(ibv_unimport_pd, V1_10)) f(pd);
}

UROCE_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  if (uv::is_uroce(pd->context))
    return uv::reg_mr(pd, addr, length, reinterpret_cast<uintptr_t>(addr),
                      static_cast<unsigned>(access));
  auto f = UROCE_REAL(ibv_reg_mr, V1_1);
  return f ? f(pd, addr, length, access) : no_real_ptr<ibv_mr>();
}

UROCE_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                     int access) {
  if (uv::is_uroce(pd->context))
    return uv::reg_mr(pd, addr, length, iova, static_cast<unsigned>(access));
  auto f = UROCE_REAL(ibv_reg_mr_iova, V1_7);
  return f ? f(pd, addr, length, iova, access) : no_real_ptr<ibv_mr>();
}

UROCE_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                      unsigned int access) {
  if (uv::is_uroce(pd->context)) return uv::reg_mr(pd, addr, length, iova, access);
  auto f = UROCE_REAL(ibv_reg_mr_iova2, V1_8);
  return f ? f(pd, addr, length, iova, access) : no_real_ptr<ibv_mr>();
}

UROCE_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                       int fd, int access) {
  if (uv::is_uroce(pd->context)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto f = UROCE_REAL(ibv_reg_dmabuf_mr, V1_12);
  return f ? f(pd, offset, length, iova, fd, access) : no_real_ptr<ibv_mr>();
}

UROCE_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length,
                              int access) {
  if (uv::is_uroce(mr->context)) return uv::rereg_mr(mr, flags, pd, addr, length, access);
  auto f = UROCE_REAL(ibv_rereg_mr, V1_1);
  if (!f) {
    errno = ENOSYS;
    return IBV_REREG_MR_ERR_INPUT;
  }
  return f(mr, flags, pd, addr, length, access);
}

UROCE_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  if (uv::is_uroce(mr->context)) return with_errno(uv::dereg_mr(mr));
  auto f = UROCE_REAL(ibv_dereg_mr, V1_1);
  return f ? f(mr) : ENOSYS;
}

UROCE_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t handle) {
  if (uv::is_uroce(pd->context)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto f = UROCE_REAL(ibv_import_mr, V1_10);
  return f ? f(pd, handle) : no_real_ptr<ibv_mr>();
}

UROCE_EXPORT void ibv_unimport_mr(ibv_mr* mr) {
  if (uv::is_uroce(mr->context)) return;
  if (auto f = UROCE_REAL(ibv_unimport_mr, V1_10)) f(mr);
}

UROCE_EXPORT ibv_dm* ibv_import_dm(ibv_context* ctx, uint32_t handle) {
  if (uv::is_uroce(ctx)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto f = UROCE_REAL(ibv_import_dm, V1_13);
  return f ? f(ctx, handle) : no_real_ptr<ibv_dm>();
}

UROCE_EXPORT void ibv_unimport_dm(ibv_dm* dm) {
  if (uv::is_uroce(dm->context)) return;
  if (auto f = UROCE_REAL(ibv_unimport_dm, V1_13)) f(dm);
}

// ---- completion channels and CQs ----------------------------------------------------------------

UROCE_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
  if (uv::is_uroce(ctx)) return uv::create_comp_channel(ctx);
  auto f = UROCE_REAL(ibv_create_comp_channel, V1_0);
  return f ? f(ctx) : no_real_ptr<ibv_comp_channel>();
}

UROCE_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* ch) {
  if (uv::is_uroce(ch->context)) return with_errno(uv::destroy_comp_channel(ch));
  auto f = UROCE_REAL(ibv_destroy_comp_channel, V1_0);
  return f ? f(ch) : ENOSYS;
}

UROCE_EXPORT ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context,
                                   ibv_comp_channel* ch, int comp_vector) {
  if (uv::is_uroce(ctx)) return uv::create_cq(ctx, cqe, cq_context, ch, comp_vector);
  auto f = UROCE_REAL(ibv_create_cq, V1_1);
  return f ? f(ctx, cqe, cq_context, ch, comp_vector) : no_real_ptr<ibv_cq>();
}

UROCE_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (uv::is_uroce(cq->context)) return with_errno(uv::resize_cq(cq, cqe));
  auto f = UROCE_REAL(ibv_resize_cq, V1_1);
  return f ? f(cq, cqe) : ENOSYS;
}

UROCE_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  if (uv::is_uroce(cq->context)) return with_errno(uv::destroy_cq(cq));
  auto f = UROCE_REAL(ibv_destroy_cq, V1_1);
  return f ? f(cq) : ENOSYS;
}

UROCE_EXPORT int ibv_get_cq_event(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) {
  // The real implementation reads the kernel's event format from the fd: uroce's channels are
  // eventfds and must never reach it.
  if (uv::is_uroce(ch->context)) return uv::get_cq_event(ch, cq, cq_context);
  auto f = UROCE_REAL(ibv_get_cq_event, V1_1);
  if (!f) {
    errno = ENOSYS;
    return -1;
  }
  return f(ch, cq, cq_context);
}

UROCE_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (uv::is_uroce(cq->context)) return uv::ack_cq_events(cq, nevents);
  if (auto f = UROCE_REAL(ibv_ack_cq_events, V1_1)) f(cq, nevents);
}

// ---- SRQs (srq.cc); AHs and multicast: not implemented for uroce -------------------------------

UROCE_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (uv::is_uroce(pd->context)) return uv::create_srq(pd, attr);
  auto f = UROCE_REAL(ibv_create_srq, V1_1);
  return f ? f(pd, attr) : no_real_ptr<ibv_srq>();
}

UROCE_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (uv::is_uroce(srq->context)) return with_errno(uv::modify_srq(srq, attr, mask));
  auto f = UROCE_REAL(ibv_modify_srq, V1_1);
  return f ? f(srq, attr, mask) : ENOSYS;
}

UROCE_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (uv::is_uroce(srq->context)) return with_errno(uv::query_srq(srq, attr));
  auto f = UROCE_REAL(ibv_query_srq, V1_1);
  return f ? f(srq, attr) : ENOSYS;
}

UROCE_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  if (uv::is_uroce(srq->context)) return with_errno(uv::destroy_srq(srq));
  auto f = UROCE_REAL(ibv_destroy_srq, V1_1);
  return f ? f(srq) : ENOSYS;
}

// ---- address handles (ah.cc); multicast: not implemented for uroce ------------------------------

UROCE_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (uv::is_uroce(pd->context)) return uv::create_ah(pd, attr);
  auto f = UROCE_REAL(ibv_create_ah, V1_1);
  return f ? f(pd, attr) : no_real_ptr<ibv_ah>();
}

UROCE_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  if (uv::is_uroce(ah->context)) return with_errno(uv::destroy_ah(ah));
  auto f = UROCE_REAL(ibv_destroy_ah, V1_1);
  return f ? f(ah) : ENOSYS;
}

UROCE_EXPORT int ibv_init_ah_from_wc(ibv_context* ctx, uint8_t port, ibv_wc* wc, ibv_grh* grh,
                                     ibv_ah_attr* ah_attr) {
  if (uv::is_uroce(ctx)) return uv::init_ah_from_wc(ctx, port, wc, grh, ah_attr);
  auto f = UROCE_REAL(ibv_init_ah_from_wc, V1_1);
  if (!f) {
    errno = ENOSYS;
    return -1;
  }
  return f(ctx, port, wc, grh, ah_attr);
}

UROCE_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port) {
  if (uv::is_uroce(pd->context)) return uv::create_ah_from_wc(pd, wc, grh, port);
  auto f = UROCE_REAL(ibv_create_ah_from_wc, V1_1);
  return f ? f(pd, wc, grh, port) : no_real_ptr<ibv_ah>();
}

UROCE_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context* ctx, ibv_ah_attr* attr,
                                             uint8_t eth_mac[6], uint16_t* vid) {
  if (uv::is_uroce(ctx)) {
    errno = EOPNOTSUPP;
    return -1;
  }
  auto f = UROCE_REAL(ibv_resolve_eth_l2_from_gid, V1_1);
  if (!f) {
    errno = ENOSYS;
    return -1;
  }
  return f(ctx, attr, eth_mac, vid);
}

UROCE_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (uv::is_uroce(qp->context)) return with_errno(uv::attach_mcast(qp, gid, lid));
  auto f = UROCE_REAL(ibv_attach_mcast, V1_1);
  return f ? f(qp, gid, lid) : ENOSYS;
}

UROCE_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (uv::is_uroce(qp->context)) return with_errno(uv::detach_mcast(qp, gid, lid));
  auto f = UROCE_REAL(ibv_detach_mcast, V1_1);
  return f ? f(qp, gid, lid) : ENOSYS;
}

// ---- queue pairs ----------------------------------------------------------------------------

UROCE_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (uv::is_uroce(pd->context)) return uv::create_qp(pd, attr);
  auto f = UROCE_REAL(ibv_create_qp, V1_1);
  return f ? f(pd, attr) : no_real_ptr<ibv_qp>();
}

UROCE_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  if (uv::is_uroce(qp->context)) return with_errno(uv::modify_qp(qp, attr, mask));
  auto f = UROCE_REAL(ibv_modify_qp, V1_1);
  return f ? f(qp, attr, mask) : ENOSYS;
}

UROCE_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  if (uv::is_uroce(qp->context)) return with_errno(uv::query_qp(qp, attr, mask, init));
  auto f = UROCE_REAL(ibv_query_qp, V1_1);
  return f ? f(qp, attr, mask, init) : ENOSYS;
}

UROCE_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  if (uv::is_uroce(qp->context)) return with_errno(uv::destroy_qp(qp));
  auto f = UROCE_REAL(ibv_destroy_qp, V1_1);
  return f ? f(qp) : ENOSYS;
}

UROCE_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (uv::is_uroce(qp->context)) return uv::qp_to_qp_ex(qp);
  auto f = UROCE_REAL(ibv_qp_to_qp_ex, V1_6);
  return f ? f(qp) : nullptr;
}

UROCE_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
  // uroce makes no promise that a remote buffer is written in order: report "not guaranteed".
  if (uv::is_uroce(qp->context)) return 0;
  auto f = UROCE_REAL(ibv_query_qp_data_in_order, V1_14);
  return f ? f(qp, op, flags) : 0;
}

UROCE_EXPORT int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  if (uv::is_uroce(qp->context)) return with_errno(EOPNOTSUPP);
  auto f = UROCE_REAL(ibv_query_ece, V1_10);
  return f ? f(qp, ece) : ENOSYS;
}

UROCE_EXPORT int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  if (uv::is_uroce(qp->context)) return with_errno(EOPNOTSUPP);
  auto f = UROCE_REAL(ibv_set_ece, V1_10);
  return f ? f(qp, ece) : ENOSYS;
}

// ---- the public uroce API (uroce/uroce.h) -----------------------------------------------------

UROCE_EXPORT const char* uroce_version(void) {
  return UROCE_VERSION_STRING;
}

UROCE_EXPORT int uroce_is_uroce_device(struct ibv_device* dev) {
  return uv::is_uroce(dev) ? 1 : 0;
}

UROCE_EXPORT int uroce_query_counters(struct ibv_context* ctx, struct uroce_counter* out, int max) {
  if (!uv::is_uroce(ctx) || max < 0 || (max > 0 && !out)) {
    errno = EINVAL;
    return -1;
  }
  return uv::query_counters(ctx, out, max);
}
