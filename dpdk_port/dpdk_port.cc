// Setup of the DPDK port: probing the device, queues, pools, MAC, link. The datapath is
// dpdk_datapath.cc.
#include "dpdk_port/dpdk_port.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <rte_alarm.h>
#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "dpdk_port/eal.h"
#include "util/log.h"

namespace uroce::dpdk {
namespace {

std::string format_mac(const Mac& m) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return buf;
}

// "0000:03:00.0" (domain:bus:device.function) or the short "03:00.0".
// A memif server's socket file left by a process that died (killed, crashed) makes the next
// server's probe fail with "Address already in use". If nobody listens on it any more, it is
// stale: remove it. Only for role=server with a filesystem socket (socket-abstract=no).
void remove_stale_memif_socket(const std::string& dev) {
  if (dev.rfind("net_memif", 0) != 0 || dev.find("role=server") == std::string::npos ||
      dev.find("socket-abstract=no") == std::string::npos)
    return;
  const size_t at = dev.find("socket=");
  if (at == std::string::npos) return;
  const std::string path = dev.substr(at + 7, dev.find(',', at) - (at + 7));
  sockaddr_un a{};
  if (path.empty() || path.size() >= sizeof a.sun_path) return;
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size());
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const bool refused =
      connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == ECONNREFUSED;
  close(fd);
  if (refused && unlink(path.c_str()) == 0)
    log().info("dpdk: removed the stale memif socket {} (no server listens on it)", path);
}

// The ring buffer size of a net_memif devargs string (bsize=N, memif's default 2048), at most
// 16 KiB: receive mbufs are sized to hold one.
uint32_t memif_bsize(const std::string& dev) {
  const size_t at = dev.find(",bsize=");
  if (at == std::string::npos) return 2048;
  const unsigned long v = std::strtoul(dev.c_str() + at + 7, nullptr, 10);
  return static_cast<uint32_t>(std::min<unsigned long>(v == 0 ? 2048 : v, 16384));
}

bool is_pci_address(const std::string& dev) {
  std::string d = dev.substr(0, dev.find(','));
  size_t colons = 0, dots = 0;
  for (char c : d) {
    if (c == ':')
      ++colons;
    else if (c == '.')
      ++dots;
    else if (!std::isxdigit(static_cast<unsigned char>(c)))
      return false;
  }
  return (colons == 1 || colons == 2) && dots == 1;
}

}  // namespace

DpdkPort::DpdkPort(const DpdkPortOptions& opt, PortCounters& counters)
    : opt_(opt), counters_(counters) {
  caps_.exact_icrc = true;
  caps_.multicast = true;
  caps_.poll_mode = true;
}

std::unique_ptr<DpdkPort> DpdkPort::open(const DpdkPortOptions& opt, PortCounters& counters,
                                         std::string* err, int port_id) {
  std::unique_ptr<DpdkPort> p(new DpdkPort(opt, counters));
  if (!p->setup(err, port_id)) return nullptr;
  return p;
}

std::unique_ptr<Port> open_port(const DpdkPortOptions& opt, PortCounters& counters,
                                std::string* err) {
  return DpdkPort::open(opt, counters, err);
}

bool DpdkPort::setup(std::string* err, int port_id) {
  auto fail = [&](const std::string& why) {
    if (err) *err = "dpdk " + (name_.empty() ? opt_.dev : name_) + ": " + why;
    return false;
  };
  if (port_id < 0) {
    if (!eal_ensure(opt_.eal_args, is_pci_address(opt_.dev), err)) return false;
    // The device's name is the devargs up to the first ',' (a vdev's name, or the PCI address).
    name_ = opt_.dev.substr(0, opt_.dev.find(','));
    uint16_t id;
    if (rte_eth_dev_get_port_by_name(name_.c_str(), &id) != 0) {
      remove_stale_memif_socket(opt_.dev);
      if (rte_dev_probe(opt_.dev.c_str()) != 0)
        return fail("cannot probe '" + opt_.dev + "': " + rte_strerror(rte_errno) +
                    " (a vdev string such as net_memif0,role=server,socket=/tmp/m.sock, or a PCI "
                    "address)");
      if (rte_eth_dev_get_port_by_name(name_.c_str(), &id) != 0)
        return fail("probed '" + opt_.dev + "' but found no ethdev named '" + name_ + "'");
      owns_port_ = true;
    }
    port_id_ = id;
  } else {
    port_id_ = static_cast<uint16_t>(port_id);
    char n[RTE_ETH_NAME_MAX_LEN];
    name_ = rte_eth_dev_get_name_by_port(port_id_, n) == 0 ? n : "port" + std::to_string(port_id);
  }

  rte_eth_dev_info info;
  if (int r = rte_eth_dev_info_get(port_id_, &info); r != 0)
    return fail(std::string("rte_eth_dev_info_get: ") + rte_strerror(-r));
  rte_eth_conf conf{};
  tx_ip_csum_offload_ = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0;
  if (tx_ip_csum_offload_) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
  caps_.ipv4_csum_offload = tx_ip_csum_offload_;
  // The port MTU: what was asked for, else what the port has (1500 for most).
  uint16_t mtu = 1500;
  rte_eth_dev_get_mtu(port_id_, &mtu);
  const std::string driver = info.driver_name ? info.driver_name : "";
  // The MTU ethdev is configured with; `mtu` is the one uroce frames for.
  uint16_t eth_mtu = mtu;
  if (opt_.mtu != 0) {
    // The PMD's largest frame bounds the MTU (Ethernet header and CRC around it): DPDK 22.11's
    // af_packet and tap take 1518-1522 bytes, memif says 1518.
    const uint32_t overhead = kEthBytes + 4;  // header and FCS, as ethdev counts them
    const uint32_t max_mtu = std::min<uint32_t>(
        info.max_mtu, info.max_rx_pktlen > overhead ? info.max_rx_pktlen - overhead : 0);
    eth_mtu = static_cast<uint16_t>(std::min<uint32_t>(opt_.mtu, max_mtu));
    // Except memif: its 1518 is a constant of its dev_info, not a limit of the driver, which
    // carries a frame of any length (in as many ring buffers of `bsize` bytes as it takes, and
    // in one when bsize holds it) and has no MTU of its own. ethdev refuses an rxmode.mtu above
    // 1500 there, so it is configured with that and uroce frames for the MTU asked for.
    const uint32_t limit = driver == "net_memif" ? kMaxMemifMtu : max_mtu;
    if (opt_.mtu > limit)
      return fail("mtu=" + std::to_string(opt_.mtu) + " exceeds what the port carries (MTU " +
                  std::to_string(limit) + ", frames of " +
                  std::to_string(driver == "net_memif" ? limit + overhead : info.max_rx_pktlen) +
                  " bytes)");
    mtu = static_cast<uint16_t>(opt_.mtu);
  }
  conf.rxmode.mtu = eth_mtu;
  // Receive interrupts let an idle engine sleep until a frame arrives (tap and NIC PMDs offer
  // them); without them the engine sleeps on a backing-off timer. The virtual devices below have
  // none in DPDK 22.11 (asking only makes ethdev log "Rx Intr handle unset").
  const bool no_rx_intr = driver == "net_ring" || driver == "net_memif" ||
                          driver == "net_af_packet" || driver == "net_null";
  conf.intr_conf.rxq = no_rx_intr ? 0 : 1;
  int r = rte_eth_dev_configure(port_id_, 1, 1, &conf);
  if (r != 0) {
    conf.intr_conf.rxq = 0;
    r = rte_eth_dev_configure(port_id_, 1, 1, &conf);
  }
  if (r != 0) return fail(std::string("rte_eth_dev_configure: ") + rte_strerror(-r));
  uint16_t nrx = kRingSize, ntx = kRingSize;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &nrx, &ntx);

  // Pools. A transmit mbuf's data room holds one TxBuf: its headroom takes the headers, its data
  // the IB packet and ICRC. A receive mbuf holds the largest frame (the MTU and Ethernet/VLAN).
  const std::string tag = std::to_string(port_id_);
  tx_pool_ = rte_pktmbuf_pool_create(("uroce_tx" + tag).c_str(), kTxPoolSize, 256, 0,
                                     static_cast<uint16_t>(sizeof(transport::TxBuf)),
                                     static_cast<int>(rte_eth_dev_socket_id(port_id_)));
  // memif copies a frame into one receive mbuf when the mbuf holds a whole ring buffer (its
  // devargs' bsize, 2048 by default); else into a chain of them, which rx_burst() would copy once
  // more to make contiguous.
  const uint32_t frame = std::max<uint32_t>(mtu + kEthBytes + kVlanBytes + 4,
                                            driver == "net_memif" ? memif_bsize(opt_.dev) : 0);
  const uint16_t rx_room = static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + std::max(frame, 2048u));
  rx_pool_ = rte_pktmbuf_pool_create(("uroce_rx" + tag).c_str(), kRxPoolSize, 256, 0, rx_room,
                                     static_cast<int>(rte_eth_dev_socket_id(port_id_)));
  // Gathering needs a PMD that copies each frame into its own memory before tx_burst returns
  // (the payload is the application's, valid while the device lock is held): memif in copy
  // mode does (eth_memif_tx copies every segment into its ring, then frees the chain). So does
  // af_packet, but it carries no frame with a full 4 KiB payload (kGatherMin: its frames end at
  // 1518 bytes in DPDK 22.11). A NIC reads the payload by DMA later, and net_ring hands the mbuf
  // itself to its peer: those get whole frames.
  const bool gather = opt_.force_tx_gather || (driver == "net_memif" &&
                                               opt_.dev.find("zero-copy=yes") == std::string::npos);
  if (gather) {
    // Each mbuf's private area holds the shared info of the payload it is attached to.
    constexpr uint16_t priv = static_cast<uint16_t>(
        RTE_ALIGN_CEIL(sizeof(rte_mbuf_ext_shared_info), RTE_MBUF_PRIV_ALIGN));
    seg_pool_ = rte_pktmbuf_pool_create(("uroce_seg" + tag).c_str(), kSegPoolSize, 256, priv,
                                        RTE_PKTMBUF_HEADROOM + 64,
                                        static_cast<int>(rte_eth_dev_socket_id(port_id_)));
  }
  if (!tx_pool_ || !rx_pool_ || (gather && !seg_pool_))
    return fail(std::string("cannot create mbuf pools: ") + rte_strerror(rte_errno) +
                " (the EAL has -m 256 MB without hugepages; raise it with eal=-m 512)");
  eal_track_pool(tx_pool_);
  eal_track_pool(rx_pool_);
  if (seg_pool_) eal_track_pool(seg_pool_);
  caps_.tx_gather_min = gather ? kGatherMin : 0;
  if ((r = rte_eth_rx_queue_setup(port_id_, 0, nrx, rte_eth_dev_socket_id(port_id_), nullptr,
                                  rx_pool_)) != 0)
    return fail(std::string("rx queue: ") + rte_strerror(-r));
  if ((r = rte_eth_tx_queue_setup(port_id_, 0, ntx, rte_eth_dev_socket_id(port_id_), nullptr)) != 0)
    return fail(std::string("tx queue: ") + rte_strerror(-r));

  rte_ether_addr a;
  if (opt_.has_mac) {
    std::memcpy(a.addr_bytes, opt_.mac.data(), 6);
    // net_af_packet shares its interface with the kernel: setting the MAC would change the
    // kernel's too (and break its neighbours' caches), so it listens promiscuously instead. So
    // does a port that cannot take a new MAC. The port filters by its MAC itself either way.
    if (driver == "net_af_packet" || rte_eth_dev_default_mac_addr_set(port_id_, &a) != 0)
      rte_eth_promiscuous_enable(port_id_);
    mac_ = opt_.mac;
  } else {
    rte_eth_macaddr_get(port_id_, &a);
    std::memcpy(mac_.data(), a.addr_bytes, 6);
  }
  // A memif client cannot start before its server listens: give the peer process a few seconds
  // to come up, as two programs started side by side need.
  for (int attempt = 0; (r = rte_eth_dev_start(port_id_)) != 0 && attempt < kStartAttempts;
       ++attempt) {
    if (attempt == 0)
      log().info("dpdk {}: cannot start yet ({}); retrying for {} s", name_, rte_strerror(-r),
                 kStartAttempts / 10);
    usleep(100'000);
  }
  if (r != 0)
    return fail(std::string("rte_eth_dev_start: ") + rte_strerror(-r) +
                (name_.rfind("net_memif", 0) == 0 ? " (is the memif server running?)" : ""));
  started_ = true;
  // IPv6 neighbour discovery reaches us at our solicited-node group (33:33:ff:…, RFC 4861 7.2.1):
  // without MLD snooping in the way, allmulticast is the plain way to hear it (as for IPv4
  // groups, join_group). classify() keeps what is ours.
  if (!opt_.ip.is_v4()) rte_eth_allmulticast_enable(port_id_);
  if (conf.intr_conf.rxq) {
    int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(port_id_, 0);
    if (fd >= 0 && rte_eth_dev_rx_intr_disable(port_id_, 0) == 0) rx_intr_fd_ = fd;
  }
  caps_.ip_mtu = mtu;
  caps_.roce_v1 = opt_.roce_v1;
  // A memif link is a peer process: down until it connects. uroce reports such a port ACTIVE
  // from the start and follows the link once the peer has connected, so a program that checks
  // the port state at open (perftest) runs whichever side starts first.
  up_until_first_link_ = driver == "net_memif";
  memif_ = driver == "net_memif";
  memif_server_ = driver == "net_memif" && opt_.dev.find("role=client") == std::string::npos &&
                  opt_.dev.find("role=slave") == std::string::npos;
  for (const auto& n : opt_.neighbours) neigh_.add_static(n.ip, n.mac);
  find_pause_stats();
  check_link(0);
  log().info("dpdk {}: port {} mac {} ip {}/{} mtu {}{}{}", name_, port_id_, format_mac(mac_),
             opt_.ip.to_string(), opt_.prefix_len, mtu,
             opt_.vlan ? " vlan " + std::to_string(opt_.vlan) : "",
             rx_intr_fd_ >= 0 ? " (rx interrupts)" : "");
  return true;
}

DpdkPort::~DpdkPort() {
  if (started_) {
    // What is still queued goes out before the port stops (an ACK held when a program exits),
    // and the PMD's ring gets a moment to drain: a memif peer takes frames only when it polls,
    // and stopping discards what its ring still holds — the peer's last message would then stay
    // unacknowledged and end in a retry error although it arrived.
    const auto until = std::chrono::steady_clock::now() + kCloseLinger;
    do {
      flush_backlog();
      timespec ts;
      clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
      const auto since = std::chrono::nanoseconds(static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 +
                                                  ts.tv_nsec - static_cast<int64_t>(last_tx_));
      if (backlog_.empty() && since > kCloseLinger) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } while (std::chrono::steady_clock::now() < until);
    // DPDK 22.11's memif PMD races itself when both ends close at once: the interrupt thread,
    // handling the peer's DISCONNECT, runs memif_disconnect() on the device while
    // rte_eth_dev_close() runs it too — both free the rings and regions (seen as a SIGSEGV in
    // the interrupt thread during close, about one program exit in 50 when the two processes of
    // a memif pair end together). So the two ends close one after the other: the server lets a
    // connected client go first (its DISCONNECT handled here while the device is still whole),
    // and either end waits for the interrupt thread to finish what it is doing.
    if (memif_server_) {
      rte_eth_link l{};
      const auto peer_until = std::chrono::steady_clock::now() + kMemifPeerWait;
      while (rte_eth_link_get_nowait(port_id_, &l) == 0 && l.link_status == RTE_ETH_LINK_UP &&
             std::chrono::steady_clock::now() < peer_until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    if (memif_) memif_barrier();
    rte_eth_dev_stop(port_id_);
  }
  for (uint16_t i = 0; i < rx_count_; ++i) rte_pktmbuf_free(rx_mbufs_[i]);
  for (rte_mbuf* m : backlog_) rte_pktmbuf_free(m);
  for (auto& q : held_)
    for (rte_mbuf* m : q) rte_pktmbuf_free(m);
  for (rte_mbuf* m : ctl_queue_) rte_pktmbuf_free(m);
  if (owns_port_) {
    // Closed and removed, so the same devargs can be probed again in this process (a device
    // reopened after ibv_close_device).
    rte_eth_dev_info info;
    rte_device* dev = rte_eth_dev_info_get(port_id_, &info) == 0 ? info.device : nullptr;
    rte_eth_dev_close(port_id_);
    if (dev) rte_dev_remove(dev);
  }
  for (rte_mempool* mp : {rx_pool_, tx_pool_, seg_pool_}) {
    if (!mp) continue;
    eal_untrack_pool(mp);  // before the free: an exiting thread no longer flushes into it
    rte_mempool_free(mp);
  }
}

void DpdkPort::memif_barrier() {
  // memif_disconnect() marks the link down first and frees the rings and regions after, all in
  // one callback of the EAL's interrupt thread, which runs its callbacks (memif's control
  // messages, alarms) one at a time: an alarm set now runs only once the callback under way has
  // returned. A fixed pause after seeing the link go down (20 ms, until this) was not always
  // enough on a loaded machine, where that thread can wait longer than that for a core; and the
  // close of an end whose link was already down did not wait at all.
  std::atomic<bool> done{false};
  auto signal = [](void* arg) { static_cast<std::atomic<bool>*>(arg)->store(true); };
  if (rte_eal_alarm_set(1, signal, &done) != 0) {
    std::this_thread::sleep_for(kMemifSettle);  // no alarm: the old pause, best effort
    return;
  }
  const auto until = std::chrono::steady_clock::now() + kMemifBarrierWait;
  while (!done.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Not run in time (the thread is stuck): cancel it, which waits for a callback under way, so
  // that it cannot touch `done` once this frame is gone.
  if (!done.load()) rte_eal_alarm_cancel(signal, &done);
}

std::string DpdkPort::describe() const {
  return "dpdk " + name_ + " (port " + std::to_string(port_id_) + ", " + opt_.ip.to_string() + ")";
}

void DpdkPort::check_link(transport::Time now) {
  rte_eth_link l{};
  if (rte_eth_link_get_nowait(port_id_, &l) != 0) return;
  const bool up = l.link_status == RTE_ETH_LINK_UP;
  if (up) seen_link_up_ = true;
  link_up_.store(up || (up_until_first_link_ && !seen_link_up_), std::memory_order_release);
  // A PAUSE quantum is 512 bit times (IEEE 802.3 31B.2); unknown speeds count as 10 Gb/s.
  if (l.link_speed != 0 && l.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN)
    quantum_ns_ = 512.0 * 1000.0 / l.link_speed;
  read_nic(l);
  next_link_check_ = now + 1'000'000'000;  // once a second while the engine runs
}

void DpdkPort::find_pause_stats() {
  // Drivers name their PAUSE counters differently (mlx5 rx_pause_ctrl_phy and rx_prioN_pause,
  // ixgbe/i40e rx_xoff_packets and rx_priorityN_xoff_packets, ice rx_xoff…): every statistic of
  // frames received or sent whose name says pause or XOFF, not the durations or transitions
  // some drivers count beside them.
  const int n = rte_eth_xstats_get_names(port_id_, nullptr, 0);
  if (n <= 0) return;
  std::vector<rte_eth_xstat_name> names(static_cast<size_t>(n));
  const int got = rte_eth_xstats_get_names(port_id_, names.data(), static_cast<unsigned>(n));
  for (int i = 0; i < std::min(n, got); ++i) {
    std::string s = names[static_cast<size_t>(i)].name;
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    if (s.find("pause") == std::string::npos && s.find("xoff") == std::string::npos) continue;
    if (s.find("duration") != std::string::npos || s.find("transition") != std::string::npos ||
        s.find("time") != std::string::npos)
      continue;
    if (s.rfind("rx", 0) == 0) pause_ids_rx_.push_back(static_cast<uint64_t>(i));
    if (s.rfind("tx", 0) == 0) pause_ids_tx_.push_back(static_cast<uint64_t>(i));
    log().debug("dpdk {}: counting PAUSE frames from statistic {}", name_,
                names[static_cast<size_t>(i)].name);
  }
}

void DpdkPort::read_nic(const rte_eth_link& l) {
  NicInfo n;
  if (l.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN) n.link_speed_mbps = l.link_speed;
  n.link_full_duplex = l.link_duplex == RTE_ETH_LINK_FULL_DUPLEX;
  rte_eth_stats st{};
  if (rte_eth_stats_get(port_id_, &st) == 0) {
    n.rx_errors = st.ierrors;
    n.rx_missed = st.imissed;
    n.rx_nombuf = st.rx_nombuf;
    n.tx_errors = st.oerrors;
  }
  auto sum = [this](std::vector<uint64_t>& ids) -> uint64_t {
    if (ids.empty()) return 0;
    std::vector<uint64_t> v(ids.size());
    if (rte_eth_xstats_get_by_id(port_id_, ids.data(), v.data(),
                                 static_cast<unsigned>(ids.size())) != static_cast<int>(ids.size()))
      return 0;
    uint64_t t = 0;
    for (uint64_t x : v) t += x;
    return t;
  };
  n.rx_pause = sum(pause_ids_rx_);
  n.tx_pause = sum(pause_ids_tx_);
  n.pause_stats = pause_ids_rx_.size() + pause_ids_tx_.size();
  // 802.3x flow control; DPDK has no query for PFC's per-priority setting (only setters), so
  // PFC on the NIC is seen through its counters alone.
  rte_eth_fc_conf fc{};
  if (rte_eth_dev_flow_ctrl_get(port_id_, &fc) == 0) {
    switch (fc.mode) {
      case RTE_ETH_FC_NONE:
        n.flow_ctrl = NicInfo::kFcNone;
        break;
      case RTE_ETH_FC_RX_PAUSE:
        n.flow_ctrl = NicInfo::kFcRxPause;
        break;
      case RTE_ETH_FC_TX_PAUSE:
        n.flow_ctrl = NicInfo::kFcTxPause;
        break;
      case RTE_ETH_FC_FULL:
        n.flow_ctrl = NicInfo::kFcFull;
        break;
    }
  }
  std::lock_guard g(nic_mu_);
  nic_ = n;
}

bool DpdkPort::nic_info(NicInfo* out) const {
  std::lock_guard g(nic_mu_);
  *out = nic_;
  return true;
}

}  // namespace uroce::dpdk
