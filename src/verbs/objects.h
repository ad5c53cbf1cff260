// The objects liburoce hands to applications, and how to get from an rdma-core pointer back to
// ours. Each object is a small standard-layout "ABI" struct whose first member is the rdma-core
// struct the application sees (ibv_device, verbs_context, ibv_pd, ibv_mr, ibv_comp_channel,
// ibv_cq_ex, ibv_qp_ex), and a C++ class deriving from it that carries uroce's state. The inline
// verbs of <infiniband/verbs.h> read those rdma-core members directly, so their layout is exactly
// rdma-core 44's (asserted below); uroce never copies rdma-core's definitions.
//
// Object identity: an object belongs to uroce iff obj->context->device is one of the devices of
// the registry (registry.cc). Everything else is forwarded to the real libibverbs (entry.cc).
//
// Lifetime: the registry's devices live until the process exits. A context owns a reference on
// the engine Device shared by every context of that device in the process; PDs, MRs, CQs, channels
// and QPs are tracked by their context so that closing it releases whatever the application left.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <type_traits>
#include <vector>

#include "engine/config.h"
#include "engine/cq.h"
#include "engine/device.h"
#include "provider.h"
#include "transport/qp.h"
#include "transport/srq.h"

namespace uroce::verbs {

// rdma-core 44 layouts the inline verbs and libibverbs' ABI depend on. A mismatch means the
// installed headers are not the ones this provider was written for.
static_assert(sizeof(verbs_context) == 648, "rdma-core 44 verbs_context");
static_assert(offsetof(verbs_context, context) == 320, "ibv_context must be last in verbs_context");
static_assert(offsetof(verbs_context, sz) + sizeof(size_t) == offsetof(verbs_context, context));
static_assert(sizeof(ibv_qp_ex) == 352, "rdma-core 44 ibv_qp_ex");
static_assert(sizeof(ibv_cq_ex) == 288, "rdma-core 44 ibv_cq_ex");
static_assert(offsetof(ibv_qp_ex, qp_base) == 0 && offsetof(ibv_cq_ex, context) == 0);
static_assert(offsetof(ibv_port_attr, port_cap_flags2) == kCompatPortAttrBytes);

class VContext;
class VCq;
struct XrcDomain;
class VQp;
class VSrq;
class VAh;

// ---- device ---------------------------------------------------------------------------------
struct DeviceAbi {
  ibv_device dev;
};
static_assert(std::is_standard_layout_v<DeviceAbi>);

class VDevice : public DeviceAbi {
 public:
  explicit VDevice(const DeviceConfig& cfg, int index);

  const DeviceConfig cfg;
  const int index;       // position among uroce devices (ibv_get_device_index)
  const __be64 guid_be;  // node GUID, network byte order

  // The engine device shared by all contexts of this device in the process; opened on the first
  // ibv_open_device, closed when the last context closes. nullptr and *err set on failure.
  std::shared_ptr<Device> acquire(std::string* err);
  // Waits until the engine pass in progress, if any, has ended: every packet the transport has
  // produced so far (an ACK, the NAK of a refused request) has then been handed to the socket.
  // Called at process exit (registry.cc), when contexts are often still open. Does nothing in a
  // child forked after the device was opened: no engine thread runs there, and the lock may
  // have been held by the parent's at the fork.
  void drain();
  // At _exit (which runs no atexit handler: fio's jobs end so): UROCE_STATS=1's counters and the
  // `uroce stats` file's removal, as drain() at exit — if this process opened the device and no
  // lock it needs is held (a signal handler's _exit may interrupt a thread inside a verb): it
  // never waits, and sends nothing.
  void at_quick_exit();

  // XRC domains opened on a file (ibv_open_xrcd with an fd), by the file's identity: every open
  // of the same file on this device, from any context of the process, shares the domain (xrc.cc).
  std::mutex xrc_mu;
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<XrcDomain>> xrc_files;

 private:
  std::mutex mu_;
  std::weak_ptr<Device> open_;
  pid_t opened_by_ = 0;  // the process that opened open_
};

// ---- context --------------------------------------------------------------------------------
struct ContextAbi {
  verbs_context vctx;  // the application sees &vctx.context
};
static_assert(std::is_standard_layout_v<ContextAbi>);

class VPd;
class VMr;
class VChannel;

class VContext : public ContextAbi {
 public:
  VContext(VDevice* udev, std::shared_ptr<Device> dev);
  ~VContext();

  VDevice* const udev;
  const std::shared_ptr<Device> dev;
  AsyncEventQueue async;       // this context's IBV_EVENT_* queue; its fd is context.async_fd
  uint64_t port_listener = 0;  // the device's fan-out of port events into `async`

  // Objects created on this context and not yet destroyed. `mu` guards the sets only.
  std::mutex mu;
  std::set<VPd*> pds;
  std::set<VMr*> mrs;
  std::set<VChannel*> channels;
  std::set<VCq*> cqs;
  std::set<VQp*> qps;
  std::set<VSrq*> srqs;
  std::set<VAh*> ahs;
  std::set<class VMw*> mws;      // mw.cc
  std::set<class VXrcd*> xrcds;  // xrc.cc

  bool live_cq(VCq* cq);
  bool live_qp(VQp* qp);
  bool live_srq(VSrq* srq);  // srq.cc
};

// ---- PD / MR --------------------------------------------------------------------------------
struct PdAbi {
  ibv_pd pd;
};
class VPd : public PdAbi {
 public:
  VContext* ctx = nullptr;
  uint32_t handle = 0;  // the engine's PD handle (MemoryAccess knows PDs by it)
};

struct MrAbi {
  ibv_mr mr;
};
class VMr : public MrAbi {
 public:
  VContext* ctx = nullptr;
  int access = 0;  // IBV_ACCESS_* as registered
};

// Memory windows (mw.cc): the engine's key table holds their state; `handle` names it there.
struct MwAbi {
  ibv_mw mw;
};
class VMw : public MwAbi {
 public:
  VContext* ctx = nullptr;
};
inline VMw* to_v(ibv_mw* m) {
  return static_cast<VMw*>(reinterpret_cast<MwAbi*>(m));
}
// Fills w.bind for an IBV_WR_BIND_MW work request (ibv_post_send or ibv_wr_bind_mw) on a QP of
// context `ctx`: 0, or EINVAL for a window that is not a type 2 window of `ctx` (type 1 windows
// are bound with ibv_bind_mw) or an MR of another context.
int mw_bind_wqe(VContext* ctx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info,
                transport::SendWqe& w);

// ---- completion channel / CQ ----------------------------------------------------------------
struct ChannelAbi {
  ibv_comp_channel ch;
};
class VChannel : public ChannelAbi {
 public:
  VChannel() = default;
  ~VChannel();  // the device forgets the channel first (cq.cc)
  VChannel(const VChannel&) = delete;
  VChannel& operator=(const VChannel&) = delete;
  VContext* ctx = nullptr;
  CompChannel impl;  // its fd is ch.fd
};

struct CqAbi {
  ibv_cq_ex cq;  // also an ibv_cq: ibv_cq is a prefix of ibv_cq_ex
};
static_assert(std::is_standard_layout_v<CqAbi>);

class VCq : public CqAbi {
 public:
  // `timestamps`: the CQ reports completion timestamps (ibv_create_cq_ex, engine/cq.h).
  VCq(VContext* ctx, uint32_t cqe, VChannel* channel, bool timestamps);

  VContext* const ctx;
  VChannel* const channel;
  Cq impl;
  // Completion and async events handed to the application (ibv_get_cq_event /
  // ibv_get_async_event); destroy waits until as many have been acknowledged (cq.mutex).
  uint32_t comp_events_reported = 0;
  uint32_t async_events_reported = 0;
  int qp_refs = 0;  // QPs using this CQ (ctx->mu): destroy is EBUSY while > 0
  ibv_wc cur{};     // the completion the extended poll API (ibv_start_poll…) is positioned on
  // The timestamp of `cur` (CLOCK_MONOTONIC ns, see Cq::poll).
  uint64_t cur_ts = 0;
};

// ---- XRC (xrc.cc) -----------------------------------------------------------------------------
class VQp;
// An XRC domain (IBTA 10.2.9.4 ff.; ibv_open_xrcd(3)): the engine's number for it and what uses
// it. Held by every handle that opened it, by its XRC SRQs and XRC receive QPs; gone with the
// last of them.
struct XrcDomain {
  uint32_t id = 0;  // Device::alloc_xrcd
  std::shared_ptr<Device> dev;
  bool on_file = false;  // opened on a file: shared by every open of that file (VDevice)
  std::pair<dev_t, ino_t> file{};
  VDevice* udev = nullptr;
  std::mutex mu;  // users and the QP list
  int users = 0;  // XRC SRQs and XRC receive QPs in it
  // XRC receive QPs by number, for ibv_open_qp: the shared QP each handle stands for.
  std::map<uint32_t, std::weak_ptr<struct TgtQp>> tgt_qps;
  ~XrcDomain();  // forgets the file (xrc.cc)
};

struct XrcdAbi {
  ibv_xrcd xrcd;
};
static_assert(std::is_standard_layout_v<XrcdAbi>);
class VXrcd : public XrcdAbi {
 public:
  VContext* ctx = nullptr;
  std::shared_ptr<XrcDomain> dom;
};
inline VXrcd* to_v(ibv_xrcd* x) {
  return static_cast<VXrcd*>(reinterpret_cast<XrcdAbi*>(x));
}

// An XRC receive QP: one transport QP that any number of ibv_qp handles stand for — the one
// ibv_create_qp_ex made, and those ibv_open_qp opened on it (ibv_open_qp(3)). Destroying a handle
// closes it; the QP goes with the last. Its affiliated events reach every handle.
struct TgtQp : transport::EventSink {
  std::shared_ptr<XrcDomain> dom;
  transport::Qp* tqp = nullptr;  // owned by dom->dev until the last handle goes
  std::mutex mu;                 // handles
  std::set<VQp*> handles;
  void qp_event(uint32_t qpn, ibv_event_type type) override;
  ~TgtQp();  // destroys the transport QP (xrc.cc)
};

// ---- QP -------------------------------------------------------------------------------------
struct QpAbi {
  ibv_qp_ex qpx;  // also an ibv_qp
};
static_assert(std::is_standard_layout_v<QpAbi>);

class VQp : public QpAbi, public transport::EventSink {
 public:
  VContext* ctx = nullptr;
  transport::Qp* tqp = nullptr;  // owned by the engine Device until destroy_qp
  VCq* scq = nullptr;
  VCq* rcq = nullptr;
  ibv_qp_cap cap{};  // enforced by post_send / post_recv
  // Receives come from this SRQ (then post_recv is EINVAL); it outlives the QP (qp_refs).
  VSrq* srq = nullptr;
  // XRC receive QPs: the shared QP this handle stands for (xrc.cc); scq and rcq are null.
  std::shared_ptr<TgtQp> tgt;
  bool sq_sig_all = false;
  uint32_t async_events_reported = 0;  // qpx.qp_base.mutex

  // The ibv_wr_* interface (QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; wr_api.cc). The
  // application serialises wr_start .. wr_complete/wr_abort on a QP, so no lock is needed.
  bool send_ops = false;
  std::vector<transport::SendWqe> batch;  // WRs built since wr_start
  int batch_err = 0;                      // first error of the batch, reported by wr_complete

  // transport::EventSink: queue IBV_EVENT_* for ibv_get_async_event on the QP's context.
  void qp_event(uint32_t qpn, ibv_event_type type) override;
};

// ---- conversions ----------------------------------------------------------------------------
inline VContext* to_v(ibv_context* c) {
  auto* abi =
      reinterpret_cast<ContextAbi*>(reinterpret_cast<char*>(c) - offsetof(verbs_context, context));
  return static_cast<VContext*>(abi);
}
inline VDevice* to_v(ibv_device* d) {
  return static_cast<VDevice*>(reinterpret_cast<DeviceAbi*>(d));
}
inline VPd* to_v(ibv_pd* p) {
  return static_cast<VPd*>(reinterpret_cast<PdAbi*>(p));
}
inline VMr* to_v(ibv_mr* m) {
  return static_cast<VMr*>(reinterpret_cast<MrAbi*>(m));
}
inline VChannel* to_v(ibv_comp_channel* c) {
  return static_cast<VChannel*>(reinterpret_cast<ChannelAbi*>(c));
}
inline VCq* to_v(ibv_cq* c) {
  return static_cast<VCq*>(reinterpret_cast<CqAbi*>(c));
}
inline VCq* to_v(ibv_cq_ex* c) {
  return static_cast<VCq*>(reinterpret_cast<CqAbi*>(c));
}
inline VQp* to_v(ibv_qp* q) {
  return static_cast<VQp*>(reinterpret_cast<QpAbi*>(q));
}
inline VQp* to_v(ibv_qp_ex* q) {
  return static_cast<VQp*>(reinterpret_cast<QpAbi*>(q));
}

inline ibv_context* to_ibv(VContext* c) {
  return &c->vctx.context;
}
inline ibv_cq* to_ibv(VCq* c) {
  return reinterpret_cast<ibv_cq*>(&c->cq);
}
inline ibv_qp* to_ibv(VQp* q) {
  return &q->qpx.qp_base;
}

// ---- SRQ (srq.cc) -----------------------------------------------------------------------------
struct SrqAbi {
  ibv_srq srq;
};
static_assert(std::is_standard_layout_v<SrqAbi>);

class VSrq : public SrqAbi, public transport::SrqEventSink {
 public:
  VContext* ctx = nullptr;
  // XRC SRQs (IBV_SRQT_XRC): the domain, the CQ its messages complete into (holding a reference
  // on it), and the number requests name it by (ibv_get_srq_num; 0 for a basic SRQ).
  std::shared_ptr<XrcDomain> xrcd;
  VCq* cq = nullptr;
  uint32_t srq_num = 0;
  // The queue the responders of its QPs take from; every call on it holds ctx->dev->lock().
  std::unique_ptr<transport::Srq> impl;
  int qp_refs = 0;                     // QPs using this SRQ (ctx->mu): destroy is EBUSY while > 0
  uint32_t async_events_reported = 0;  // srq.mutex; destroy waits until as many are acked

  // transport::SrqEventSink (device lock held): queue IBV_EVENT_SRQ_LIMIT_REACHED.
  void srq_limit_reached() override;
};

inline VSrq* to_v(ibv_srq* s) {
  return static_cast<VSrq*>(reinterpret_cast<SrqAbi*>(s));
}
inline ibv_srq* to_ibv(VSrq* s) {
  return &s->srq;
}

}  // namespace uroce::verbs
