// The DPDK port: a Port (ports/port.h) over one DPDK ethdev — a NIC by PCI address or a virtual
// device (net_memif, net_af_packet, net_tap, net_ring). It frames Ethernet / 802.1Q / IPv4 / UDP
// itself (frames.h), answers ARP and ICMP echo for the device address and resolves next hops
// (neighbours.h), honours received PAUSE / PFC frames per priority, and — since it sees whole
// frames — hands the pipeline the real IP ID, so the ICRC is checked exactly.
//
// Setup (dpdk_port.cc) is apart from the datapath (dpdk_datapath.cc), as in eRPC.
//
// Buffers: a TxBuf lives in the data room of a DPDK mbuf from the port's transmit pool, so the
// headers are written into its headroom and the mbuf goes to the NIC as it is: no copy. Over
// net_memif (copy mode) a full 4 KiB payload is not even copied into the TxBuf: it goes as a
// segment attached to the memory region (PortCaps::tx_gather_min), and the PMD's own copy
// into its ring is the only one. Received frames are the PMD's mbufs, freed at the next rx_burst().
//
// Threading (beyond ports/port.h): the receive side (rx_burst, under the engine's receive lock)
// and the transmit side (under the device lock) meet in the neighbour table, the PAUSE state and
// the queue of control frames (ARP, ICMP replies) the receive side produces; ctl_mu_ guards
// those. Only the transmit side touches the PMD's transmit queue: control frames wait in
// ctl_queue_ until the next tx_burst() or poll().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dpdk_port/dpdk.h"
#include "dpdk_port/frames.h"
#include "dpdk_port/neighbours.h"
#include "ports/port.h"

struct rte_eth_link;
struct rte_mbuf;
struct rte_mempool;

namespace uroce::dpdk {

class DpdkPort : public Port {
 public:
  static constexpr uint16_t kRxBurst = 32;
  static constexpr uint16_t kRingSize = 1024;    // descriptors per queue
  static constexpr uint32_t kTxPoolSize = 4096;  // TxBufs (mbufs) in flight, held or queued
  static constexpr uint32_t kRxPoolSize = 4096;
  // Mbufs for gathered frames (PortCaps::tx_gather_min): two a frame, one attached to the payload
  // in the memory region and one for the ICRC behind it.
  static constexpr uint32_t kSegPoolSize = 2 * kTxPoolSize;
  // The smallest payload sent from where it lies, where the PMD allows it: a full 4 KiB one.
  // Smaller ones lost over memif (1 KiB payloads: medians 1343-1290 against 1614-2253 MB/s
  // copied, 16 alternating pairs; 2 KiB ones no better), the two extra mbufs and segment copies
  // costing more than the copy they save.
  static constexpr uint32_t kGatherMin = 4096;
  // The largest MTU over net_memif, which has none of its own (setup()): jumbo Ethernet's.
  static constexpr uint32_t kMaxMemifMtu = 9000;
  static constexpr size_t kMaxHeld = 2048;    // packets held while their priority is paused
  static constexpr int kStartAttempts = 100;  // rte_eth_dev_start tries, 100 ms apart
  // On close, frames sent this recently get this long to leave the PMD's ring (see ~DpdkPort).
  static constexpr std::chrono::milliseconds kCloseLinger{100};
  // On close, a memif server waits this long at most for its connected client to disconnect
  // first; then either end waits for DPDK's interrupt thread to finish that disconnect
  // (memif_barrier), at most kMemifBarrierWait, or kMemifSettle where no alarm can be set.
  static constexpr std::chrono::milliseconds kMemifPeerWait{250};
  static constexpr std::chrono::milliseconds kMemifBarrierWait{5000};
  static constexpr std::chrono::milliseconds kMemifSettle{20};

  // Opens the port named by opt.dev, or (port_id >= 0) an ethdev someone else created, e.g. a
  // test's net_ring pair. nullptr and *err on failure.
  static std::unique_ptr<DpdkPort> open(const DpdkPortOptions& opt, PortCounters& counters,
                                        std::string* err, int port_id = -1);
  ~DpdkPort() override;
  DpdkPort(const DpdkPort&) = delete;
  DpdkPort& operator=(const DpdkPort&) = delete;

  // Port.
  const PortCaps& caps() const override { return caps_; }
  wire::IpAddr ip() const override { return opt_.ip; }
  std::string describe() const override;
  std::span<const RxFrame> rx_burst() override;
  transport::TxBuf* tx_alloc() override;
  void tx_free(transport::TxBuf* buf) override;
  size_t tx_burst(std::span<transport::TxBuf* const> bufs) override;
  std::span<const int> wait_fds() const override;
  bool arm_wait() override;
  void disarm_wait() override;
  transport::Time next_deadline() const override;
  bool wants_poll() const override { return ctl_dirty_.load(std::memory_order_acquire); }
  bool poll(transport::Time now) override;
  bool link_up() const override { return link_up_.load(std::memory_order_acquire); }
  bool nic_info(NicInfo* out) const override;
  int join_group(uint32_t group) override;
  void leave_group(uint32_t group) override;

  uint16_t port_id() const { return port_id_; }
  const Mac& mac() const { return mac_; }
  // The time a PAUSE quantum lasts on this link: 512 bit times at the link speed.
  double quantum_ns() const { return quantum_ns_; }

 private:
  DpdkPort(const DpdkPortOptions& opt, PortCounters& counters);
  bool setup(std::string* err, int port_id);
  // Returns once DPDK's interrupt thread has finished the callback it is running (a memif
  // disconnect under way), or after kMemifBarrierWait (~DpdkPort).
  void memif_barrier();

  // --- datapath (dpdk_datapath.cc) ---
  static rte_mbuf* mbuf_of(transport::TxBuf* b);
  static const transport::TxBuf* txbuf_of(const rte_mbuf* m);
  // Frames a RoCE packet in place (its dst MAC known) and returns its mbuf: one segment, or
  // with a payload by reference (TxBuf::ext) three — the headers in the TxBuf's mbuf, the payload
  // attached where it lies, the ICRC — which the PMD copies into its ring as it sends them.
  rte_mbuf* frame(transport::TxBuf* b, const Mac& dst);
  // Copies the payload and ICRC of a gathered frame into its first mbuf and frees the others
  // (tx_gather_copied): for a frame the port keeps past tx_burst(), whose payload may be gone by
  // the time it leaves.
  void make_whole(rte_mbuf* m);
  // The next hop of an address: itself on the subnet (or a group), else the gateway.
  wire::IpAddr next_hop(const wire::IpAddr& ip) const;
  // 802.1p priority a packet is tagged with and paused by: the packet's own (TxBuf::pcp: a
  // CNP's cnp_802p_prio), else the configured priority for data packets on a VLAN, else
  // DSCP >> 3 (the usual DSCP-to-priority trust map: DSCP 26 → 3, 48 → 6).
  int priority_of(const transport::TxBuf& b) const;
  // Hands frames to the PMD; what it does not take now waits in backlog_ (in order).
  void transmit(rte_mbuf** ms, uint16_t n);
  void flush_backlog();
  // Sends what ctl_queue_ and the neighbour table released (device lock held).
  void send_control(transport::Time now);
  // ARP request (IPv4) or neighbour solicitation (IPv6) for `ip`. ctl_mu_ held; queues it.
  void send_neighbour_request(const wire::IpAddr& ip);
  // Handles a non-RoCE frame on the receive side (ARP, echo, PAUSE); returns true when it took
  // ownership of the mbuf (queued it for transmission).
  // The rest of handle_control(): neighbour discovery, a learned neighbour (releasing what
  // waited for it), the L2 header of an answer to the frame `c` from `to`. ctl_mu_ held.
  bool handle_nd(rte_mbuf* m, const uint8_t* f, size_t len, const Classified& c,
                 transport::Time now);
  void learn_neighbour(const wire::IpAddr& ip, const Mac& mac, transport::Time now, bool create);
  L2 reply_l2(const Mac& to, const Classified& c) const;
  // Bytes of framing in front of the IB packet of `b`.
  size_t header_bytes(const transport::TxBuf& b) const;
  static bool is_multicast(const wire::IpAddr& ip);
  bool handle_control(rte_mbuf* m, const uint8_t* f, size_t len, const Classified& c,
                      transport::Time now);
  void release_held(transport::Time now);  // device lock held
  void check_link(transport::Time now);
  // The extended statistics that count PAUSE / PFC frames (setup), and nic_ from the NIC's
  // statistics, flow control and the link just read (check_link).
  void find_pause_stats();
  void read_nic(const rte_eth_link& l);

  DpdkPortOptions opt_;
  PortCounters& counters_;
  PortCaps caps_;
  uint16_t port_id_ = 0;
  bool owns_port_ = false;  // probed by us: stopped and closed on destruction
  bool started_ = false;
  std::string name_;
  Mac mac_{};
  rte_mempool* tx_pool_ = nullptr;
  rte_mempool* rx_pool_ = nullptr;
  rte_mempool* seg_pool_ = nullptr;  // gathered frames' payload and ICRC mbufs
  bool tx_ip_csum_offload_ = false;
  double quantum_ns_ = 51.2;  // 10 Gb/s until the link says otherwise
  int rx_intr_fd_ = -1;       // the PMD's receive interrupt (eventfd), or -1
  bool intr_armed_ = false;
  std::atomic<bool> link_up_{false};
  bool up_until_first_link_ = false;  // report up before the link first comes up (memif)
  bool memif_ = false;                // net_memif
  bool memif_server_ = false;         // net_memif in the server role (the default role)
  bool seen_link_up_ = false;
  transport::Time next_link_check_ = 0;
  // The NIC's own view (nic_info): refreshed with the link, read from any thread.
  mutable std::mutex nic_mu_;
  NicInfo nic_;
  std::vector<uint64_t> pause_ids_rx_, pause_ids_tx_;  // xstat ids

  // Receive side: mbufs of the last burst (freed at the next), frames handed up, and copies of
  // frames that came in several segments.
  rte_mbuf* rx_mbufs_[kRxBurst] = {};
  uint16_t rx_count_ = 0;
  RxFrame rx_out_[kRxBurst];
  uint16_t rx_out_n_ = 0;
  std::vector<std::vector<uint8_t>> rx_linear_;

  // Transmit side (device lock): frames the PMD did not take yet, and packets held by PAUSE,
  // per priority, in order.
  std::deque<rte_mbuf*> backlog_;
  transport::Time last_tx_ = 0;  // the last frame handed to the PMD (CLOCK_MONOTONIC_COARSE)
  std::deque<rte_mbuf*> held_[8];
  size_t held_count_ = 0;

  // Shared by both sides (ctl_mu_).
  mutable std::mutex ctl_mu_;
  NeighbourTable neigh_;
  PauseState pause_;
  std::vector<rte_mbuf*> ctl_queue_;     // control frames to send
  std::vector<uint32_t> groups_;         // joined multicast groups (host order)
  std::atomic<bool> has_groups_{false};  // !groups_.empty(), read without ctl_mu_

  // Housekeeping (poll, next_deadline; device lock): when it is next due, valid while
  // ctl_dirty_ is clear. Anything that changes the control state (a control frame received, a
  // neighbour looked up the slow way, a packet held or left in the backlog) sets ctl_dirty_, and
  // the next poll() does the whole work and computes ctl_due_ again; until then a pass asks
  // the port nothing that needs ctl_mu_ or a clock (about 100 ns a pass on memif).
  std::atomic<bool> ctl_dirty_{true};
  transport::Time ctl_due_ = 0;
  transport::Time compute_deadline() const;  // ctl_mu_ not held
  std::vector<void*> scratch_released_, scratch_dropped_;
  std::vector<wire::IpAddr> scratch_requests_;
};

}  // namespace uroce::dpdk
