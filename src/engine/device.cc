#include "engine/device.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "engine/port_factory.h"
#include "engine/stats_shm.h"
#include "util/log.h"

namespace uroce {
namespace {

// Bytes a RoCEv2 packet adds around its payload: IPv4 20 + UDP 8 + BTH 12 + the largest extended
// headers a payload-carrying packet has (RETH 16 + ImmDt 4) + ICRC 4.
constexpr uint32_t kRoceOverhead = 20 + 8 + 12 + 16 + 4 + 4;

// The largest IB MTU (IBTA 9.6.? : 256..4096) whose packets fit the interface MTU unfragmented.
uint16_t ib_mtu_for(uint32_t if_mtu) {
  for (uint16_t m : {4096, 2048, 1024, 512, 256})
    if (m + kRoceOverhead <= if_mtu) return m;
  return 256;
}

// QP totals are summed into the published file at most this often (10 per second): cheap, and
// fresh enough for a person watching `uroce stats -w 1`.
constexpr transport::Time kPublishInterval = 100'000'000;  // ns

// The published file of a device, its device counters bound into it (they are then live there).
// Never fails the open: without /dev/shm the device works, unobserved, and says so.
std::unique_ptr<stats_shm::Publisher> make_publisher(const DeviceConfig& cfg, const Port& port,
                                                     uint16_t mtu, DeviceCounters& counters,
                                                     size_t* qp_slot_base, size_t* cc_slot_base,
                                                     size_t* nic_slot_base) {
  std::string why;
  if (!stats_shm::publishing_enabled(&why)) {
    if (!why.empty()) log().warn("{}", why);
    return nullptr;
  }
  stats_shm::Identity id;
  id.pid = getpid();
  if (auto self = stats_shm::proc_info(id.pid)) {
    id.start_time = self->start_time;
    id.comm = self->comm;
  }
  id.device = cfg.name;
  id.ip = cfg.addr();
  id.netdev = cfg.netdev;
  id.mtu = mtu;
  std::vector<std::string> names;
  counters.for_each([&names](const char* name, uint64_t) { names.emplace_back(name); });
  *qp_slot_base = names.size();
  stats_shm::for_each_qp_counter(
      transport::QpCounters{}, [&names](const char* name, uint64_t) { names.emplace_back(name); });
  *cc_slot_base = names.size();
  for (size_t s = 0; s < stats_shm::kCcQpSlots; ++s)
    for (size_t f = 0; f < stats_shm::kCcQpFieldCount; ++f)
      names.push_back(stats_shm::cc_slot_name(s, f));
  // A port with a NIC of its own (DPDK) publishes what the NIC says of itself (ports/port.h).
  if (NicInfo nic; port.nic_info(&nic)) {
    *nic_slot_base = names.size();
    NicInfo::for_each(nic, [&names](const char* name, uint64_t) { names.emplace_back(name); });
  }
  // Files of this user's processes that died without closing their devices (SIGKILL) go first.
  stats_shm::remove_dead_files();
  auto pub = stats_shm::Publisher::create(id, names, &why);
  if (!pub) {
    log().warn("{}: not publishing statistics for `uroce stats`: {}", cfg.name, why);
    return nullptr;
  }
  size_t i = 0;
  counters.for_each_ref([&](const char*, Counter& c) { c.bind(pub->slot(i++)); });
  return pub;
}

}  // namespace

Device::Device(const DeviceConfig& cfg) : cfg_(cfg) {}

std::unique_ptr<Device> Device::open(const DeviceConfig& cfg, std::string* err) {
  // The process's ICRC routine (UROCE_ICRC), before this device computes any: the configuration
  // checked that it exists here. Every device of a process is configured alike.
  if (!wire::select_icrc_routine(cfg.icrc)) {
    if (err) *err = cfg.name + ": the ICRC routine asked for is not available on this host";
    return nullptr;
  }
  log().debug("{}: ICRC by {}", cfg.name, wire::icrc_implementation());
  std::unique_ptr<Device> d(new Device(cfg));
  std::string why;
  // The port first: it says what MTU it carries, which the published identity shows. Its
  // counters are bound into the published file below, before any packet moves.
  std::unique_ptr<Port> port = open_port(cfg, d->counters_.port, &why);
  if (!port) {
    if (err) *err = cfg.name + ": " + why;
    return nullptr;
  }
  // An IPv6 header is 40 bytes, 20 more than kRoceOverhead's IPv4 one.
  const uint32_t ip_mtu = port->caps().ip_mtu;
  d->mtu_ = ib_mtu_for(cfg.is_ipv6() && ip_mtu > 20 ? ip_mtu - 20 : ip_mtu);
  // Before anything can count: binding moves the counters into the file.
  d->publisher_ = make_publisher(cfg, *port, d->mtu_, d->counters_, &d->qp_slot_base_,
                                 &d->cc_slot_base_, &d->nic_slot_base_);
  DatapathOptions dopt;
  dopt.faults = cfg.faults;
  dopt.pcap_path = cfg.pcap_path;
  dopt.data_dscp = cfg.dscp;
  d->dp_ = Datapath::open(std::move(port), dopt, d->counters_, &why);
  if (!d->dp_) {
    if (err) *err = cfg.name + ": " + why;
    return nullptr;
  }
  Dispatch::Limits lim;
  lim.max_qp = DeviceLimits::kMaxQp;
  lim.max_mcast_grp = DeviceLimits::kMaxMcastGrp;
  lim.max_mcast_qp_attach = DeviceLimits::kMaxMcastQpAttach;
  d->keys_.set_odp_fault_counter(&d->counters_.odp_faults);
  d->dispatch_ = std::make_unique<Dispatch>(*d->dp_, d->keys_, d->counters_, lim);
  // A device several processes share numbers its QPs in this process's part of the QPN space.
  if (PortShare* sh = d->dp_->port().share())
    d->dispatch_->set_qpn_space({sh->qpn_base(), sh->qpn_count(), sh->qpn_cursor()});
  if (d->publisher_) d->publisher_->set_port_active(d->port_active());
  try {
    Engine::Client& client = *d;
    d->engine_ = std::make_unique<Engine>(d->mu_, *d->dp_, client, "uroce-" + cfg.name);
    d->engine_->set_counters(&d->counters_.engine_wakeups, &d->counters_.app_progress_passes,
                             &d->counters_.engine_rx_takeovers,
                             &d->counters_.engine_handoff_lapses);
    d->engine_->start();
  } catch (const std::system_error& e) {
    if (err) *err = cfg.name + ": cannot start the engine: " + e.what();
    return nullptr;
  }
  return d;
}

PortShare* Device::port_share() {
  return dp_->port().share();
}

bool Device::port_active() const {
  return dp_ && dp_->port().link_up();
}

uint64_t Device::add_port_listener(PortListener fn) {
  std::lock_guard<std::mutex> g(port_mu_);
  uint64_t id = next_listener_++;
  port_listeners_.emplace(id, std::move(fn));
  return id;
}

void Device::remove_port_listener(uint64_t id) {
  std::lock_guard<std::mutex> g(port_mu_);
  port_listeners_.erase(id);
}

void Device::on_link_change() {
  bool up = dp_->port().link_up();
  (up ? counters_.port_up_events : counters_.port_down_events).add();
  log().info("{}: link of {} is {}", cfg_.name, dp_->port().describe(), up ? "up" : "down");
  if (publisher_) publisher_->set_port_active(up);
  std::lock_guard<std::mutex> g(port_mu_);
  for (auto& [id, fn] : port_listeners_) fn(up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
}

Device::~Device() {
  if (engine_) engine_->stop();
  if (!dispatch_) return;  // open() failed before the device was whole
  flush();                 // what an application pass held (Datapath::set_hold) still leaves
  if (publisher_) {
    // The final totals, for a reader that looks before the file goes (a destructor below).
    std::lock_guard<std::mutex> g(mu_);
    publish(monotonic_now(), /*force=*/true);
  }
  print_stats_once();
}

void Device::withdraw_stats() {
  if (publisher_) publisher_->withdraw();
}

void Device::print_stats_once() {
  if (cfg_.print_stats && !stats_printed_.exchange(true)) print_stats(stderr);
}

void Device::print_stats(FILE* out) {
  // Only non-zero counters: a clean run prints a few lines, a troubled one shows what went wrong.
  std::fprintf(out, "uroce: %s (%s) counters:\n", cfg_.name.c_str(),
               format_device_addr(cfg_).c_str());
  counters_.for_each([out](const char* name, uint64_t v) {
    if (v != 0) std::fprintf(out, "  %-24s %llu\n", name, static_cast<unsigned long long>(v));
  });
  stats_shm::for_each_qp_counter(qp_counter_totals(), [out](const char* name, uint64_t v) {
    if (v != 0) std::fprintf(out, "  %-24s %llu\n", name, static_cast<unsigned long long>(v));
  });
}

transport::QpCounters Device::qp_counter_totals() {
  std::lock_guard<std::mutex> g(mu_);
  return dispatch_->counter_totals();
}

uint16_t Device::mtu_bytes() const {
  return mtu_;
}

uint64_t Device::guid() const {
  // EUI-64 of the locally administered MAC 02:00:a:b:c:d (RFC 4291 appendix A): stable for an
  // address, distinct between devices, and recognisable as synthetic.
  // An IPv6 device: the address's low 32 bits (the end of its interface identifier).
  uint32_t ip = cfg_.addr().v4();
  // Bytes 00 00 a ff fe b c d (the universal/local bit of 02 flips back to 0 in EUI-64).
  return (uint64_t(ip >> 24) << 40) | (0xfffeull << 24) | (ip & 0xffffff);
}

ibv_gid Device::gid() const {
  // The address's 16 bytes: ::ffff:a.b.c.d for IPv4, the IPv6 address itself for IPv6 (RoCEv2's
  // GID is the IP address, Annex A17.4.5.1).
  ibv_gid g{};
  std::memcpy(g.raw, cfg_.addr().data(), 16);
  return g;
}

uint32_t Device::alloc_pd() {
  auto g = app_call();
  if (keys_.pd_count() >= DeviceLimits::kMaxPd) return 0;  // max_pd (ibv_query_device)
  return keys_.alloc_pd();
}

int Device::dealloc_pd(uint32_t pd) {
  auto g = app_call();
  return keys_.dealloc_pd(pd);
}

int Device::reg_mr(uint32_t pd, void* addr, size_t len, int access, uint32_t* lkey,
                   uint32_t* rkey) {
  return reg_mr_iova(pd, addr, len, reinterpret_cast<uintptr_t>(addr), access, lkey, rkey);
}

int Device::reg_mr_iova(uint32_t pd, void* addr, size_t len, uint64_t iova, int access,
                        uint32_t* lkey, uint32_t* rkey) {
  // The implicit on-demand region (the whole address space) is the one beyond max_mr_size.
  const bool implicit = (access & IBV_ACCESS_ON_DEMAND) && !addr && len == SIZE_MAX && iova == 0;
  if (len > DeviceLimits::kMaxMrSize && !implicit) return EINVAL;
  auto g = app_call();
  if (keys_.mr_count() >= DeviceLimits::kMaxMr) return ENOMEM;
  return keys_.reg_mr(pd, addr, len, iova, access, lkey, rkey);
}

int Device::dereg_mr(uint32_t lkey) {
  auto g = app_call();
  return keys_.dereg_mr(lkey);
}

int Device::prefetch_mr(uint32_t pd, bool write, bool populate, const ibv_sge* sges, uint32_t n) {
  std::vector<const uint8_t*> host(n);
  {
    auto g = app_call();
    for (uint32_t i = 0; i < n; ++i) {
      if (int rc =
              keys_.prefetch_range(pd, sges[i].lkey, sges[i].addr, sges[i].length, write, &host[i]))
        return rc;
    }
  }
  // Faulting pages in may take long (a large range, pages to read from swap): not under the
  // device lock. A region deregistered meanwhile only means the pages were faulted in for nothing.
  if (populate) {
    for (uint32_t i = 0; i < n; ++i) {
      if (transport::TableMemory::populate(host[i], sges[i].length, write) !=
          transport::MemStatus::kOk)
        return EFAULT;
    }
  }
  return 0;
}

int Device::rereg_mr(uint32_t lkey, int flags, uint32_t pd, void* addr, size_t len, uint64_t iova,
                     int access) {
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && len > DeviceLimits::kMaxMrSize) return EINVAL;
  auto g = app_call();
  return keys_.rereg_mr(lkey, flags, pd, addr, len, iova, access);
}

int Device::alloc_mw(uint32_t pd, ibv_mw_type type, uint32_t* handle, uint32_t* rkey) {
  auto g = app_call();
  if (keys_.mw_count() >= DeviceLimits::kMaxMw) return ENOMEM;
  return keys_.alloc_mw(pd, type, handle, rkey);
}

int Device::dealloc_mw(uint32_t handle) {
  auto g = app_call();
  return keys_.dealloc_mw(handle);
}

transport::MemoryAccess& Device::memory() {
  return keys_;
}

transport::Qp* Device::create_qp(transport::QpInit init, int* err) {
  int dummy;
  if (!err) err = &dummy;
  // An XRC send QP has no receive side, an XRC receive QP neither CQ nor PD of its own: it
  // takes its SRQ's (ibv_create_qp_ex(3)).
  const bool xrc_recv = init.type == IBV_QPT_XRC_RECV;
  const bool needs_recv_cq = init.type != IBV_QPT_XRC_SEND && !xrc_recv;
  if ((!init.send_cq && !xrc_recv) || (!init.recv_cq && needs_recv_cq) ||
      (xrc_recv && init.xrcd == 0)) {
    *err = EINVAL;
    return nullptr;
  }
  auto g = app_call();
  if (xrc_recv) {
    init.pd = 0;
    init.send_cq = init.recv_cq = nullptr;
    init.xrc_srqs = &xrc_srqs_;
  } else if (keys_.pd_ref(init.pd) != 0) {
    *err = EINVAL;
    return nullptr;
  }
  // The device numbers its QPs (the GSI QP, QPN 1, can be asked for by number).
  if (init.qpn != Dispatch::kGsiQpn) init.qpn = 0;
  init.local_ip = cfg_.addr();
  init.early_retransmit = cfg_.early_retransmit;
  init.selective_repeat = cfg_.selective_repeat && init.type == IBV_QPT_RC;
  init.ack_riders = cfg_.ack_riders && init.type == IBV_QPT_RC;
  init.paths = init.selective_repeat ? cfg_.paths : 1;
  init.rnr_grace_ns = cfg_.rnr_grace_ns;
  init.cc = cfg_.cc;  // UROCE_CC (docs/congestion-control.md); line rate: the QpInit default
  if (!init.events) init.events = this;
  transport::Qp* qp = dispatch_->create_qp(init, err);
  if (!qp) keys_.pd_unref(init.pd);
  return qp;
}

void Device::set_qp_handle(transport::Qp* qp, ibv_qp* handle) {
  auto g = app_call();
  dispatch_->set_cookie(qp, handle);
}

int Device::destroy_qp(transport::Qp* qp) {
  auto g = app_call();
  uint32_t pd = 0;
  const uint32_t qpn = qp->qpn();
  if (int rc = dispatch_->destroy_qp(qp, &pd); rc != 0) return rc;
  if (publisher_) publisher_->drop_qp(qpn);  // its row goes now, not at the next snapshot
  keys_.pd_unref(pd);
  return 0;
}

uint32_t Device::alloc_xrcd() {
  auto g = app_call();
  return next_xrcd_++;
}

uint32_t Device::add_xrc_srq(transport::Srq* srq) {
  auto g = app_call();
  // XRCETH's 24-bit XRCSRQ field: numbered from the QPN space, unique on the device among all
  // the processes that share it (Dispatch::reserve_number).
  const uint32_t n = dispatch_->reserve_number();
  if (n != 0) xrc_srqs_.by_num.emplace(n, srq);
  return n;
}

void Device::remove_xrc_srq(uint32_t srqn) {
  auto g = app_call();
  auto it = xrc_srqs_.by_num.find(srqn);
  if (it == xrc_srqs_.by_num.end()) return;
  const transport::Srq* srq = it->second;
  xrc_srqs_.by_num.erase(it);
  dispatch_->release_number(srqn);
  dispatch_->for_each_qp([srq](transport::Qp& qp) {
    if (qp.type() == IBV_QPT_XRC_RECV) qp.xrc_srq_gone(srq);
  });
}

int Device::attach_mcast(transport::Qp* qp, uint32_t group) {
  // Groups are IPv4 (UdpPort::join_group): an IPv6 device's sockets cannot receive them.
  if (cfg_.is_ipv6()) return EOPNOTSUPP;
  auto g = app_call();
  return dispatch_->attach_mcast(qp, group);
}

int Device::detach_mcast(transport::Qp* qp, uint32_t group) {
  auto g = app_call();
  return dispatch_->detach_mcast(qp, group);
}

std::unique_lock<std::mutex> Device::app_call() {
  std::unique_lock<std::mutex> g(mu_);
  if (dp_->holding()) dp_->send_held(monotonic_now());
  return g;
}

void Device::after_call(transport::Qp* qp, transport::Time now) {
  bool more = false;
  transport::Time deadline = dispatch_->after_call(qp, now, &more);
  // Packets held back by transmit fault injection (UROCE_FAULTS tx.delay, tx.reorder).
  engine_->wake_by(dp_->tx_fault_deadline());
  engine_->wake_by(publish(now));  // the QP totals this call changed, now or soon
  engine_->wake_by(deadline);
  // ACKs a reply under way still holds (Datapath::Hold::kUntilPost): sent at their limit.
  engine_->wake_by(dp_->hold_limit());
  // Still more to send (the transmit ring filled): let the engine continue in the background.
  if (more) engine_->kick();
}

transport::Time Device::publish(transport::Time now, bool force) {
  if (!publisher_) return transport::kNever;
  if (!force && now < next_publish_) return next_publish_;
  size_t i = qp_slot_base_;
  stats_shm::for_each_qp_counter(dispatch_->counter_totals(),
                                 [&](const char*, uint64_t v) { publisher_->set(i++, v); });
  // Both tables show the QPs with the lowest QPNs (stats_shm.h): only those rows are built, from
  // one ordering of the live QPs — not a row per QP every snapshot (16 384 QPs were ~3 MB).
  const size_t shown = std::max(size_t{stats_shm::kQpTableCapacity}, stats_shm::kCcQpSlots);
  publish_order_.clear();
  dispatch_->for_each_qp([this](const transport::Qp& q) { publish_order_.push_back(&q); });
  const size_t n = std::min(publish_order_.size(), shown);
  std::partial_sort(publish_order_.begin(), publish_order_.begin() + static_cast<ptrdiff_t>(n),
                    publish_order_.end(), [](const transport::Qp* a, const transport::Qp* b) {
                      return a->qpn() < b->qpn();
                    });
  if (cfg_.cc.algorithm != transport::cc::Algorithm::kNone) {
    // The reaction points' state.
    for (size_t s = 0; s < stats_shm::kCcQpSlots; ++s) {
      const size_t at = cc_slot_base_ + stats_shm::kCcQpFieldCount * s;
      uint64_t qpn = 0, rate_kbps = 0, alpha_ppm = 0, sent_pkts = 0;
      if (s < n) {
        const transport::Qp& q = *publish_order_[s];
        qpn = q.qpn();
        rate_kbps = q.cc_rate_bps() / 1000;
        alpha_ppm = static_cast<uint64_t>(std::clamp(q.cc_alpha(now), 0.0, 1.0) * 1e6 + 0.5);
        sent_pkts = q.counters().sent_pkts;
      }
      publisher_->set(at, qpn);
      publisher_->set(at + 1, rate_kbps);
      publisher_->set(at + 2, alpha_ppm);
      publisher_->set(at + 3, sent_pkts);
    }
  }
  // The QP table (stats_shm.h).
  std::vector<stats_shm::QpRow> rows;
  rows.reserve(std::min(n, size_t{stats_shm::kQpTableCapacity}));
  for (size_t i = 0; i < std::min(n, size_t{stats_shm::kQpTableCapacity}); ++i) {
    const transport::Qp& q = *publish_order_[i];
    const transport::Qp::Peer peer = q.peer();
    rows.push_back({.qpn = q.qpn(),
                    .type = static_cast<uint32_t>(q.type()),
                    .state = static_cast<uint32_t>(q.state()),
                    .peer_qpn = peer.qpn,
                    .peer_ip = peer.ip,
                    .counters = q.counters()});
  }
  publisher_->set_qps(rows);
  if (NicInfo nic; nic_slot_base_ != kNoSlot && dp_->port().nic_info(&nic)) {
    size_t at = nic_slot_base_;
    NicInfo::for_each(nic, [&](const char*, uint64_t v) { publisher_->set(at++, v); });
  }
  publisher_->set_port_active(port_active());
  publisher_->set_snapshot_ns(now);
  next_publish_ = now + kPublishInterval;
  return transport::kNever;
}

int Device::modify_qp(transport::Qp* qp, const ibv_qp_attr& attr, int mask) {
  auto g = app_call();
  transport::Time now = monotonic_now();
  int rc = qp->modify(attr, mask, now);
  after_call(qp, now);
  return rc;
}

void Device::query_qp(transport::Qp* qp, ibv_qp_attr& attr, ibv_qp_init_attr& init) {
  auto g = app_call();
  qp->query(attr, init);
}

int Device::post_send(transport::Qp* qp, const transport::SendWqe* wqes, size_t n, size_t* bad) {
  std::lock_guard<std::mutex> g(mu_);
  transport::Time now = monotonic_now();
  int rc = 0;
  for (size_t i = 0; i < n; ++i) {
    rc = qp->post_send(wqes[i], now);
    if (rc != 0) {
      if (bad) *bad = i;
      break;
    }
  }
  after_call(qp, now);
  return rc;
}

int Device::post_recv(transport::Qp* qp, const transport::RecvWqe* wqes, size_t n, size_t* bad) {
  // Without the device lock: a receive pass holding it for a burst must not delay the repost that
  // the burst's next SEND needs (transport/recv_queue.h). A posted WQE sends nothing and arms no
  // timer — a responder that sent an RNR NAK waits for the requester's retry —, so there is
  // nothing to schedule either.
  for (size_t i = 0; i < n; ++i) {
    if (int rc = qp->post_recv(wqes[i]); rc != 0) {
      if (bad) *bad = i;
      return rc;
    }
  }
  // A message waits for this receive (RNR grace, transport/qp.cc): the engine lets it in now,
  // not at the end of its grace. Noted without the device lock, which a pass may hold.
  if (qp->waits_for_recv()) {
    {
      std::lock_guard<std::mutex> g(recv_posted_mu_);
      recv_posted_.push_back(qp->qpn());
    }
    engine_->kick();
  }
  // It is the application's next call after a receive pass of its own: what that pass held for
  // it (the ACK of the message it reposts for) leaves now. ibv_rc_pingpong reposts, then
  // replies (and the reply's post flushes anyway); fio's server reposts, then sleeps on its
  // completion channel, and its peer's next SEND waits for that ACK.
  if (dp_->holding()) engine_->release_held(monotonic_now());
  return 0;
}

AsyncEventQueue& Device::async_events() {
  return async_;
}

const DeviceCounters& Device::counters() const {
  return counters_;
}

void Device::flush() {
  std::lock_guard<std::mutex> g(mu_);
  dp_->send_held(monotonic_now());
}

bool Device::poll_progress() {
  return engine_->poll_from_app();
}

void Device::note_poll_result(bool found) {
  engine_->note_poll_result(found);
}

void Device::stop_polling() {
  engine_->stop_polling();
}

void Device::on_arm() {
  engine_->on_arm();
}

void Device::send_held_before_sleep() {
  // A thread that goes to sleep posts nothing: the ACKs its pass held for its next post leave
  // now. fio's server sleeps on its channel through the client's RDMA WRITEs, which complete at
  // the client only with their ACKs: held for a post that never came, each waited for the engine
  // thread's next look (milliseconds; fio verb=write ran at 11 MB/s). Not if the lock is taken:
  // the pass holding it is the engine's, which sends its holds itself.
  if (!dp_->holding()) return;
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (g.owns_lock()) dp_->send_held(monotonic_now());
}

int Device::get_cq_event(CompChannel& ch, void** cq_cookie) {
  // An event already waits (the fd is readable): no receive pass, no sleep.
  if (int rc = ch.try_get_event(cq_cookie); rc != EAGAIN) return rc;
  // This thread takes what its own passes below raise on the channel at once (Taking).
  CompChannel::Taking taking(ch);
  if (ch.nonblocking()) {
    // A program polling the fd in its own loop: what has arrived may complete its work. Without
    // an event it goes back to sleep in its poll(), and what its pass held leaves first (below).
    // From now on the channel's fd wakes on arrivals while the application has the receive side
    // (Engine::watch_port_on): that wake-up brings the program here, and this pass receives. A
    // pass another thread runs meanwhile is waited for: returning at once would send the program
    // back to a poll() that the unreceived datagram makes return at once.
    const bool watched = engine_->watch_port_on(ch);
    engine_->poll_from_app(/*wait_for_receiver=*/watched && ch.watching());
    const int rc = ch.try_get_event(cq_cookie);
    if (rc == EAGAIN) {
      send_held_before_sleep();
      // It sleeps in its poll() now, and runs no timers there: the engine's timer covers them.
      if (ch.watching()) engine_->app_sleeps();
    }
    return rc;
  }
  if (!engine_->wait_begin()) return ch.get_event(cq_cookie);  // poll mode: the engine receives
  struct WaitEnd {
    Engine& e;
    ~WaitEnd() { e.wait_end(); }
  } end{*engine_};
  const std::span<const int> rx = engine_->wait_fds();
  std::vector<pollfd> fds;
  fds.reserve(1 + rx.size());
  fds.push_back({ch.event_fd(), POLLIN, 0});
  for (int fd : rx) fds.push_back({fd, POLLIN, 0});
  for (;;) {
    // Receive what is there (a pass the engine runs meanwhile is waited for, not raced), then
    // look for the event it may have raised.
    engine_->poll_from_app(/*wait_for_receiver=*/true);
    if (int rc = ch.try_get_event(cq_cookie); rc != EAGAIN) return rc;
    send_held_before_sleep();
    // Sleep until an event is queued (another thread's pass, or the engine's timers) or a
    // datagram arrives. A signal ends the wait with EINTR, as a read of the kernel's event file.
    if (poll(fds.data(), fds.size(), -1) < 0 && errno == EINTR) return EINTR;
  }
}

void Device::forget_channel(CompChannel& ch) {
  engine_->forget_channel(ch);
}

void Device::set_handoff_ns(transport::Time ns) {
  engine_->set_handoff_ns(ns);
}

size_t Device::qp_count() {
  std::lock_guard<std::mutex> g(mu_);
  return dispatch_->qp_count();
}

void Device::on_packets(std::span<const RxPacket> pkts, transport::Time now) {
  dispatch_->receive(pkts, now);
}

transport::Time Device::on_progress(transport::Time now, bool* again) {
  {
    // QPs whose waiting messages a receive posted since may now let in (post_recv): the pump
    // round below runs them.
    std::lock_guard<std::mutex> g(recv_posted_mu_);
    for (uint32_t qpn : recv_posted_)
      if (transport::Qp* qp = dispatch_->find(qpn)) dispatch_->touch(qp);
    recv_posted_.clear();
  }
  transport::Time next = dispatch_->progress(now, again);
  return std::min(next, publish(now));
}

void Device::qp_event(uint32_t qpn, ibv_event_type type) {
  ibv_async_event ev{};
  ev.event_type = type;
  ev.element.qp = static_cast<ibv_qp*>(dispatch_->cookie(qpn));
  async_.push(ev);
}

}  // namespace uroce
