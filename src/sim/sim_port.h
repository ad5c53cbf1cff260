// The simulated port (ports/port.h): one more implementation of the port interface, under the
// same receive pipeline and dispatch as the kernel-UDP and DPDK ports (engine/datapath.h). A
// simulated host is a uroce device's pure parts over it.
//
// Transmit: tx_burst turns each buffer into a Frame — the IB packet and the ICRC the pipeline
// appended, the IPv4/UDP fields the ICRC covered, the traffic class its DSCP maps to — and hands
// it to the host's NIC (NicQueue), which queues it for the link. The transmit ring is the NIC's
// memory: tx_alloc() refuses (backpressure, as a full descriptor ring does) while `ring` frames
// are allocated or still held by the NIC, so the transport waits while the link is busy or
// paused instead of queueing without bound; the host pumps again when a frame leaves.
//
// Receive: the host delivers arriving frames; rx_burst() hands up everything delivered since the
// last call, with the IPv4 header as the NIC saw it (PortCaps::exact_icrc: the ICRC is checked
// exactly) and the TOS as the last switch left it (ECN CE marks).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ports/port.h"
#include "sim/frame.h"

namespace uroce::sim {

// The NIC side of a simulated port.
class NicQueue {
 public:
  virtual ~NicQueue() = default;
  // Queues `f` for the link.
  virtual void transmit(Frame* f) = 0;
  // Frames the NIC holds (queued or on the wire).
  virtual size_t held() const = 0;
};

// DSCP → traffic class: the class selector (DSCP >> 3), as switches map DSCP to 802.1p by
// default — data and ACKs at DSCP 26 travel in class 3, CNPs at DSCP 48 in class 6.
inline uint8_t dscp_class(uint8_t dscp) {
  return uint8_t(dscp >> 3);
}

class SimPort final : public Port {
 public:
  SimPort(uint32_t ip, uint32_t ring, FramePool& pool, NicQueue& nic, std::string name);
  ~SimPort() override;

  const PortCaps& caps() const override { return caps_; }
  wire::IpAddr ip() const override { return wire::IpAddr(ip_); }
  std::string describe() const override { return "sim " + name_; }

  std::span<const RxFrame> rx_burst() override;
  transport::TxBuf* tx_alloc() override;
  void tx_free(transport::TxBuf* buf) override;
  size_t tx_burst(std::span<transport::TxBuf* const> bufs) override;

  // A frame arrived for this host; rx_burst() hands it up (and then returns it to the pool).
  void deliver(Frame* f) { rx_pending_.push_back(f); }
  bool rx_pending() const { return !rx_pending_.empty(); }
  // Whether tx_alloc() would refuse now.
  bool ring_full() const { return allocated_ + nic_.held() >= ring_; }
  // The counters the pipeline's DeviceCounters::port are kept in (set by the host).
  void set_counters(PortCounters* c) { counters_ = c; }

 private:
  PortCaps caps_;
  uint32_t ip_;
  uint32_t ring_;
  FramePool& pool_;
  NicQueue& nic_;
  std::string name_;
  PortCounters* counters_ = nullptr;
  std::vector<transport::TxBuf*> free_;   // buffers not allocated
  std::vector<transport::TxBuf*> owned_;  // every buffer (freed at destruction)
  size_t allocated_ = 0;                  // handed out by tx_alloc, not yet back
  std::vector<Frame*> rx_pending_;        // delivered, not yet handed up
  std::vector<Frame*> rx_batch_;          // the last batch (valid until the next rx_burst)
  std::vector<RxFrame> rx_frames_;
};

}  // namespace uroce::sim
