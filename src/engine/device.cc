#include "engine/device.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <system_error>

#include "engine/log.h"
#include "engine/stats_shm.h"
#include "ports/udp/udp_port.h"

namespace uroce {
namespace {

// The DestQP every multicast packet carries (IBTA vol. 1: the multicast QPN, 0xFFFFFF).
constexpr uint32_t kMulticastQpn = 0xffffff;

// Bytes a RoCEv2 packet adds around its payload: IPv4 20 + UDP 8 + BTH 12 + the largest extended
// headers a payload-carrying packet has (RETH 16 + ImmDt 4) + ICRC 4.
constexpr uint32_t kRoceOverhead = 20 + 8 + 12 + 16 + 4 + 4;

uint32_t netdev_mtu(const std::string& netdev) {
  if (netdev.empty() || netdev.size() >= IFNAMSIZ) return 1500;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1500;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, netdev.c_str(), netdev.size());
  uint32_t mtu = 1500;
  if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0) mtu = static_cast<uint32_t>(ifr.ifr_mtu);
  close(fd);
  return mtu;
}

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
std::unique_ptr<stats_shm::Publisher> make_publisher(const DeviceConfig& cfg, uint16_t mtu,
                                                     DeviceCounters& counters,
                                                     size_t* qp_slot_base) {
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
  id.ipv4 = cfg.ipv4;
  id.netdev = cfg.netdev;
  id.mtu = mtu;
  std::vector<std::string> names;
  counters.for_each([&names](const char* name, uint64_t) { names.emplace_back(name); });
  *qp_slot_base = names.size();
  stats_shm::for_each_qp_counter(
      transport::QpCounters{}, [&names](const char* name, uint64_t) { names.emplace_back(name); });
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
  std::unique_ptr<Device> d(new Device(cfg));
  d->mtu_ = ib_mtu_for(netdev_mtu(cfg.netdev));
  // Before anything can count: binding moves the counters into the file.
  d->publisher_ = make_publisher(cfg, d->mtu_, d->counters_, &d->qp_slot_base_);
  UdpPortOptions opt;
  opt.ipv4 = cfg.ipv4;
  opt.faults = cfg.faults;
  opt.pcap_path = cfg.pcap_path;
  opt.gso = cfg.gso;
  std::string why;
  d->port_ = UdpPort::open(opt, d->counters_, &why);
  if (!d->port_) {
    if (err) *err = cfg.name + ": " + why;
    return nullptr;
  }
  if (!cfg.netdev.empty()) {
    d->link_ = LinkWatch::open(cfg.netdev, &why);
    if (!d->link_)
      log().warn("{}: cannot watch the link state of {} ({}); the port reports ACTIVE", cfg.name,
                 cfg.netdev, why);
  }
  if (d->publisher_) d->publisher_->set_port_active(d->port_active());
  try {
    Engine::Client& client = *d;
    d->engine_ = std::make_unique<Engine>(d->mu_, *d->port_, client, "uroce-" + cfg.name);
    if (d->link_) d->engine_->watch(d->link_->fd());
    d->engine_->start();
  } catch (const std::system_error& e) {
    if (err) *err = cfg.name + ": cannot start the engine: " + e.what();
    return nullptr;
  }
  return d;
}

bool Device::port_active() const {
  return !link_ || link_->up();
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

void Device::on_watched_fd() {
  if (!link_->drain()) return;
  bool up = link_->up();
  (up ? counters_.port_up_events : counters_.port_down_events).add();
  log().info("{}: link of {} is {}", cfg_.name, cfg_.netdev, up ? "up" : "down");
  if (publisher_) publisher_->set_port_active(up);
  std::lock_guard<std::mutex> g(port_mu_);
  for (auto& [id, fn] : port_listeners_) fn(up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
}

Device::~Device() {
  if (engine_) engine_->stop();
  if (publisher_) {
    // The final totals, for a reader that looks before the file goes (a destructor below).
    std::lock_guard<std::mutex> g(mu_);
    publish(monotonic_now(), /*force=*/true);
  }
  if (cfg_.print_stats) print_stats(stderr);
}

void Device::print_stats(FILE* out) {
  // Only non-zero counters: a clean run prints a few lines, a troubled one shows what went wrong.
  std::fprintf(out, "uroce: %s (%s) counters:\n", cfg_.name.c_str(),
               format_ipv4(cfg_.ipv4).c_str());
  counters_.for_each([out](const char* name, uint64_t v) {
    if (v != 0) std::fprintf(out, "  %-24s %llu\n", name, static_cast<unsigned long long>(v));
  });
  stats_shm::for_each_qp_counter(qp_counter_totals(), [out](const char* name, uint64_t v) {
    if (v != 0) std::fprintf(out, "  %-24s %llu\n", name, static_cast<unsigned long long>(v));
  });
}

namespace {

void add_counters(transport::QpCounters& sum, const transport::QpCounters& c) {
  sum.sent_pkts += c.sent_pkts;
  sum.rcvd_pkts += c.rcvd_pkts;
  sum.retry_exceeded_err += c.retry_exceeded_err;
  sum.rnr_retry_exceeded_err += c.rnr_retry_exceeded_err;
  sum.send_rnr_err += c.send_rnr_err;
  sum.rcvd_rnr_err += c.rcvd_rnr_err;
  sum.rcvd_seq_err += c.rcvd_seq_err;
  sum.out_of_seq_request += c.out_of_seq_request;
  sum.duplicate_request += c.duplicate_request;
  sum.send_err += c.send_err;
  sum.completer_retry_err += c.completer_retry_err;
  sum.local_ack_timeout_err += c.local_ack_timeout_err;
  sum.retransmitted_pkts += c.retransmitted_pkts;
  sum.send_window_cuts += c.send_window_cuts;
  sum.early_retransmits += c.early_retransmits;
  sum.dropped_pkts += c.dropped_pkts;
  sum.qkey_violation += c.qkey_violation;
  sum.out_of_buffer += c.out_of_buffer;
  sum.uc_dropped_msgs += c.uc_dropped_msgs;
}

}  // namespace

transport::QpCounters Device::qp_counter_totals() {
  std::lock_guard<std::mutex> g(mu_);
  return sum_qp_counters();
}

transport::QpCounters Device::sum_qp_counters() {
  transport::QpCounters sum = retired_qp_counters_;
  for (auto& [qpn, e] : qps_) add_counters(sum, e.qp->counters());
  return sum;
}

uint16_t Device::mtu_bytes() const {
  return mtu_;
}

uint64_t Device::guid() const {
  // EUI-64 of the locally administered MAC 02:00:a:b:c:d (RFC 4291 appendix A): stable for an
  // address, distinct between devices, and recognisable as synthetic.
  uint32_t ip = cfg_.ipv4;
  // Bytes 00 00 a ff fe b c d (the universal/local bit of 02 flips back to 0 in EUI-64).
  return (uint64_t(ip >> 24) << 40) | (0xfffeull << 24) | (ip & 0xffffff);
}

ibv_gid Device::gid() const {
  ibv_gid g{};
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  uint32_t be = htonl(cfg_.ipv4);
  std::memcpy(&g.raw[12], &be, 4);
  return g;
}

uint32_t Device::alloc_pd() {
  std::lock_guard<std::mutex> g(mu_);
  return keys_.alloc_pd();
}

int Device::dealloc_pd(uint32_t pd) {
  std::lock_guard<std::mutex> g(mu_);
  return keys_.dealloc_pd(pd);
}

int Device::reg_mr(uint32_t pd, void* addr, size_t len, int access, uint32_t* lkey,
                   uint32_t* rkey) {
  return reg_mr_iova(pd, addr, len, reinterpret_cast<uintptr_t>(addr), access, lkey, rkey);
}

int Device::reg_mr_iova(uint32_t pd, void* addr, size_t len, uint64_t iova, int access,
                        uint32_t* lkey, uint32_t* rkey) {
  if (len > DeviceLimits::kMaxMrSize) return EINVAL;
  std::lock_guard<std::mutex> g(mu_);
  if (keys_.mr_count() >= DeviceLimits::kMaxMr) return ENOMEM;
  return keys_.reg_mr(pd, addr, len, iova, access, lkey, rkey);
}

int Device::dereg_mr(uint32_t lkey) {
  std::lock_guard<std::mutex> g(mu_);
  return keys_.dereg_mr(lkey);
}

int Device::rereg_mr(uint32_t lkey, int flags, uint32_t pd, void* addr, size_t len, uint64_t iova,
                     int access) {
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && len > DeviceLimits::kMaxMrSize) return EINVAL;
  std::lock_guard<std::mutex> g(mu_);
  return keys_.rereg_mr(lkey, flags, pd, addr, len, iova, access);
}

int Device::alloc_mw(uint32_t pd, ibv_mw_type type, uint32_t* handle, uint32_t* rkey) {
  std::lock_guard<std::mutex> g(mu_);
  if (keys_.mw_count() >= DeviceLimits::kMaxMw) return ENOMEM;
  return keys_.alloc_mw(pd, type, handle, rkey);
}

int Device::dealloc_mw(uint32_t handle) {
  std::lock_guard<std::mutex> g(mu_);
  return keys_.dealloc_mw(handle);
}

transport::MemoryAccess& Device::memory() {
  return keys_;
}

uint32_t Device::alloc_qpn() {
  // QPNs are 24 bits; skip 0 and 1 (special QPs) and any still in use after a wrap.
  for (;;) {
    uint32_t q = next_qpn_;
    next_qpn_ = (next_qpn_ + 1) & wire::kQpnMask;
    if (next_qpn_ < 2) next_qpn_ = 2;
    if (q >= 2 && qps_.count(q) == 0) return q;
  }
}

transport::Qp* Device::create_qp(transport::QpInit init, int* err) {
  int dummy;
  if (!err) err = &dummy;
  if (!init.send_cq || !init.recv_cq) {
    *err = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(mu_);
  if (qps_.size() >= DeviceLimits::kMaxQp) {
    *err = ENOMEM;
    return nullptr;
  }
  if (keys_.pd_ref(init.pd) != 0) {
    *err = EINVAL;
    return nullptr;
  }
  init.qpn = alloc_qpn();
  init.local_ip = cfg_.ipv4;
  init.early_retransmit = cfg_.early_retransmit;
  if (!init.events) init.events = this;
  try {
    QpEntry e;
    e.qp = std::make_unique<transport::Qp>(init, *port_, keys_);
    e.pd = init.pd;
    transport::Qp* qp = e.qp.get();
    qps_.emplace(init.qpn, std::move(e));
    *err = 0;
    return qp;
  } catch (const std::bad_alloc&) {
    *err = ENOMEM;
  } catch (const std::exception&) {
    *err = EINVAL;  // the transport refused the capabilities
  }
  keys_.pd_unref(init.pd);
  return nullptr;
}

void Device::set_qp_handle(transport::Qp* qp, ibv_qp* handle) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = qps_.find(qp->qpn());
  if (it != qps_.end() && it->second.qp.get() == qp) it->second.handle = handle;
}

int Device::destroy_qp(transport::Qp* qp) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = qps_.find(qp->qpn());
  if (it == qps_.end() || it->second.qp.get() != qp) return EINVAL;
  keys_.pd_unref(it->second.pd);
  add_counters(retired_qp_counters_, qp->counters());
  detach_all_mcast(it->first);
  qps_.erase(it);
  return 0;
}

int Device::attach_mcast(transport::Qp* qp, uint32_t group) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = qps_.find(qp->qpn());
  // Only UD QPs take part in multicast (IBTA vol. 1); 224.0.0.0/4 is IPv4's multicast range.
  if (it == qps_.end() || it->second.qp.get() != qp || qp->type() != IBV_QPT_UD ||
      (group >> 28) != 0xe)
    return EINVAL;
  auto g = mcast_.find(group);
  if (g == mcast_.end()) {
    if (mcast_.size() >= DeviceLimits::kMaxMcastGrp) return ENOMEM;
    g = mcast_.emplace(group, std::vector<uint32_t>{}).first;
  }
  std::vector<uint32_t>& members = g->second;
  if (std::find(members.begin(), members.end(), qp->qpn()) != members.end()) return 0;
  if (members.size() >= DeviceLimits::kMaxMcastQpAttach) return ENOMEM;
  if (members.empty()) {
    if (int e = port_->join_group(group); e != 0) {
      mcast_.erase(g);
      return e;
    }
  }
  members.push_back(qp->qpn());
  return 0;
}

int Device::detach_mcast(transport::Qp* qp, uint32_t group) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = mcast_.find(group);
  if (it == mcast_.end()) return EINVAL;
  auto m = std::find(it->second.begin(), it->second.end(), qp->qpn());
  if (m == it->second.end()) return EINVAL;
  it->second.erase(m);
  if (it->second.empty()) {
    port_->leave_group(group);
    mcast_.erase(it);
  }
  return 0;
}

void Device::detach_all_mcast(uint32_t qpn) {
  for (auto it = mcast_.begin(); it != mcast_.end();) {
    std::erase(it->second, qpn);
    if (it->second.empty()) {
      port_->leave_group(it->first);
      it = mcast_.erase(it);
    } else {
      ++it;
    }
  }
}

void Device::track(uint32_t qpn, QpEntry& e) {
  if (!e.in_pump_list && e.qp->wants_pump()) {
    e.in_pump_list = true;
    pump_list_.push_back(qpn);
  }
  transport::Time d = e.qp->next_deadline();
  if (d == e.armed) return;
  e.armed = d;
  if (d == transport::kNever) return;  // the old heap entry goes stale
  timers_.emplace_back(d, qpn);
  std::push_heap(timers_.begin(), timers_.end(), std::greater<>());
  // Deadlines that move before they fire (ACK coalescing, retransmission restarts) leave stale
  // entries behind; rebuild from the live deadlines when they dominate the heap.
  if (timers_.size() > 4 * qps_.size() + 64) {
    timers_.clear();
    for (auto& [q, x] : qps_)
      if (x.armed != transport::kNever) timers_.emplace_back(x.armed, q);
    std::make_heap(timers_.begin(), timers_.end(), std::greater<>());
  }
}

transport::Time Device::earliest_timer() {
  while (!timers_.empty()) {
    auto [d, qpn] = timers_.front();
    auto it = qps_.find(qpn);
    if (it != qps_.end() && it->second.armed == d) return d;
    std::pop_heap(timers_.begin(), timers_.end(), std::greater<>());
    timers_.pop_back();
  }
  return transport::kNever;
}

void Device::after_call(transport::Qp* qp, transport::Time now) {
  if (qp->wants_pump()) qp->pump(now);
  port_->tx_flush();
  // Packets held back by transmit fault injection (UROCE_FAULTS tx.delay, tx.reorder).
  engine_->wake_by(port_->tx_fault_deadline());
  engine_->wake_by(publish(now));  // the QP totals this call changed, now or soon
  auto it = qps_.find(qp->qpn());
  if (it == qps_.end()) return;
  track(it->first, it->second);
  engine_->wake_by(it->second.armed);
  // Still more to send (the transmit ring filled): let the engine continue in the background.
  if (it->second.in_pump_list) engine_->kick();
}

transport::Time Device::publish(transport::Time now, bool force) {
  if (!publisher_) return transport::kNever;
  if (!force && now < next_publish_) return next_publish_;
  size_t i = qp_slot_base_;
  stats_shm::for_each_qp_counter(sum_qp_counters(),
                                 [&](const char*, uint64_t v) { publisher_->set(i++, v); });
  publisher_->set_port_active(port_active());
  publisher_->set_snapshot_ns(now);
  next_publish_ = now + kPublishInterval;
  return transport::kNever;
}

int Device::modify_qp(transport::Qp* qp, const ibv_qp_attr& attr, int mask) {
  std::lock_guard<std::mutex> g(mu_);
  transport::Time now = monotonic_now();
  int rc = qp->modify(attr, mask, now);
  after_call(qp, now);
  return rc;
}

void Device::query_qp(transport::Qp* qp, ibv_qp_attr& attr, ibv_qp_init_attr& init) {
  std::lock_guard<std::mutex> g(mu_);
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
  std::lock_guard<std::mutex> g(mu_);
  transport::Time now = monotonic_now();
  int rc = 0;
  for (size_t i = 0; i < n; ++i) {
    rc = qp->post_recv(wqes[i]);
    if (rc != 0) {
      if (bad) *bad = i;
      break;
    }
  }
  // A receive WQE can unblock a responder that sent an RNR NAK; it sends nothing itself, but the
  // QP may have deadlines or output to schedule.
  after_call(qp, now);
  return rc;
}

AsyncEventQueue& Device::async_events() {
  return async_;
}

const DeviceCounters& Device::counters() const {
  return counters_;
}

bool Device::poll_progress() {
  return engine_->poll_from_app();
}

size_t Device::qp_count() {
  std::lock_guard<std::mutex> g(mu_);
  return qps_.size();
}

void Device::on_packets(std::span<const RxPacket> pkts, transport::Time now) {
  for (const RxPacket& p : pkts) {
    // A datagram sent to a group goes to every QP attached to it, and must name the multicast
    // QPN; that QPN sent to a unicast address names no QP.
    const bool to_group = (p.info.dst_ip >> 28) == 0xe;
    if (to_group || p.pkt.bth.dest_qp == kMulticastQpn) {
      auto g = to_group && p.pkt.bth.dest_qp == kMulticastQpn ? mcast_.find(p.info.dst_ip)
                                                              : mcast_.end();
      if (g == mcast_.end()) {
        counters_.rx_unknown_qp.add();
        continue;
      }
      // Each attached QP checks the Q_Key (and its state) itself, counting what it drops.
      for (uint32_t qpn : g->second) {
        QpEntry& e = qps_.find(qpn)->second;  // destroy_qp detaches first
        e.qp->receive(p.pkt, p.info, now);
        track(qpn, e);
      }
      continue;
    }
    auto it = qps_.find(p.pkt.bth.dest_qp);
    if (it == qps_.end()) {
      counters_.rx_unknown_qp.add();
      continue;
    }
    it->second.qp->receive(p.pkt, p.info, now);
    track(it->first, it->second);
  }
}

transport::Time Device::on_progress(transport::Time now, bool* again) {
  counters_.engine_wakeups.add();  // once per engine loop pass
  // Due timers, earliest first; each QP at most once per pass, so a QP whose deadline stays in
  // the past cannot hold the lock for ever (the engine then bounds its wake-up rate).
  std::vector<uint32_t>& due = due_scratch_;
  due.clear();
  for (transport::Time d = earliest_timer(); d <= now; d = earliest_timer()) {
    uint32_t qpn = timers_.front().second;
    std::pop_heap(timers_.begin(), timers_.end(), std::greater<>());
    timers_.pop_back();
    qps_.find(qpn)->second.armed = transport::kNever;  // earliest_timer() checked it exists
    due.push_back(qpn);
  }
  for (uint32_t qpn : due) {
    QpEntry& e = qps_.find(qpn)->second;
    e.qp->on_timer(now);
    track(qpn, e);
  }
  // Pump in rounds: a round stops when the transmit ring fills, the flush frees it, the next round
  // continues. Stop when nothing wants to send or a round sent nothing (a rate-limited QP waits
  // for its deadline, not for a spinning engine); after kRounds yield the lock to other threads.
  constexpr int kRounds = 8;
  std::vector<uint32_t>& list = pump_scratch_;
  for (int round = 0; round < kRounds && !pump_list_.empty(); ++round) {
    list.swap(pump_list_);
    pump_list_.clear();
    for (uint32_t qpn : list) {
      auto it = qps_.find(qpn);
      if (it == qps_.end()) continue;  // destroyed since it was listed
      it->second.in_pump_list = false;
      if (it->second.qp->wants_pump()) it->second.qp->pump(now);
      track(qpn, it->second);
    }
    list.clear();
    if (port_->tx_flush() == 0) break;
    if (round == kRounds - 1 && !pump_list_.empty()) *again = true;
  }
  return std::min(earliest_timer(), publish(now));
}

void Device::qp_event(uint32_t qpn, ibv_event_type type) {
  ibv_async_event ev{};
  ev.event_type = type;
  auto it = qps_.find(qpn);
  ev.element.qp = it != qps_.end() ? it->second.handle : nullptr;
  async_.push(ev);
}

}  // namespace uroce
