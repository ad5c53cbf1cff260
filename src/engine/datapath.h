// The device's packet pipeline over one Port (ports/port.h): everything every datapath needs,
// written once, so that a port does only its I/O.
//
// Receive, for each frame a port hands up, cheapest checks first, each drop a named counter:
//   counted (rcvd_pkts/bytes) → fault injection (UROCE_FAULTS rx) → length → ICRC → capture →
//   parse → a transport::RxInfo for the dispatch
// The ICRC is checked exactly when the port saw the IP header (PortCaps::exact_icrc: DPDK, a
// simulated port); a kernel socket does not show it, and peers put arbitrary IP IDs there (rxe
// counts up), so such a packet is accepted when *some* ID makes its ICRC valid
// (wire::icrc_matches_some_ip_id): every corruption of the bytes we can see is caught except
// with probability 2^-16 (docs/wire-format.md).
//
// Transmit: the transport writes packets into the port's buffers (transport::PacketSink) and
// commits them; tx_flush() lets the port fix what the ICRC covers (tx_prepare: IP ID, the real
// source port), appends each ICRC in place, captures, and hands the burst to the port — or, with
// transmit faults on, through the injector (which stands for the wire: corruption after the
// ICRC, so the peer's check catches it) one datagram at a time.
//
// Threading: the receive side (rx_burst, rx_fault_deadline) under the engine's receive lock; the
// transmit side (PacketSink, tx_flush, tx_fault_deadline) and multicast under the device lock.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/config.h"
#include "engine/counters.h"
#include "engine/dispatch.h"
#include "engine/faults.h"
#include "engine/ip_id_guard.h"
#include "engine/pcap.h"
#include "engine/port_events.h"
#include "engine/rx_packet.h"
#include "ports/port.h"
#include "transport/env.h"
#include "wire/wire.h"

namespace uroce {

struct DatapathOptions {
  FaultConfig faults;     // UROCE_FAULTS
  std::string pcap_path;  // UROCE_PCAP: capture every packet sent and received ("" = none)
  // DSCP (RFC 2474) of packets whose TxBuf::dscp is kDscpPortDefault.
  uint8_t data_dscp = 0;
};

class Datapath : public Transmitter {
 public:
  // Largest datagram accepted: the largest IB packet plus its ICRC. Anything longer is no packet
  // of ours (rx_truncated).
  static constexpr size_t kMaxDatagram = transport::kMaxIbPacket + wire::kIcrcBytes;

  // Takes the port. nullptr and *err when the capture file cannot be opened.
  static std::unique_ptr<Datapath> open(std::unique_ptr<Port> port, const DatapathOptions& opt,
                                        DeviceCounters& counters, std::string* err);
  // Sends what transmit fault injection still holds (delay, reordering): it was sent as far as
  // the transport knows, and an ACK held back when a program exits must still reach the peer, as
  // it would from a NIC, or the peer's last SEND ends in a retry error.
  ~Datapath() override;
  Datapath(const Datapath&) = delete;
  Datapath& operator=(const Datapath&) = delete;

  Port& port() { return *port_; }
  const Port& port() const { return *port_; }
  // What the port reports beside frames (PortEvent), for listeners above the engine.
  PortEvents& port_events() { return events_; }

  // Receives one batch from the port without blocking and returns what passed; `now` is the
  // engine's clock (fault injection's delay line runs on it). Empty when nothing waits.
  std::span<const RxPacket> rx_burst(transport::Time now);

  // transport::PacketSink. tx_alloc returns nullptr when the port's ring is empty.
  transport::TxBuf* tx_alloc() override;
  // Queues `buf`. A length no packet has (< BTH or > kMaxIbPacket) is a transport bug: refused
  // and counted in tx_errors. A payload by reference (TxBuf::ext) is copied in when the port
  // cannot take it that way. Payloads go by reference from the port's PortCaps::tx_gather_min
  // on, unless transmit faults or a capture are on (both want each packet in one piece).
  void tx_commit(transport::TxBuf* buf) override;
  // Sends the queued packets in commit order. Returns how many left the queue for the wire: the
  // port's count of what it sent, or with transmit faults every packet taken (the lossy path is
  // part of the wire: callers that loop while tx_flush() makes progress must not stop because the
  // injector dropped or held what they sent).
  size_t tx_flush(transport::Time now) override;
  size_t tx_queued() const { return queue_.size(); }

  // Holding (device lock). While on, a flush of at most kMaxHeld packets keeps them queued and
  // reports them as sent; a larger one, or any flush once holding is off, sends everything
  // queued, held packets first. Not with transmit faults on (their timing is seeded), nor when a
  // queued packet's payload is by reference (TxBuf::ext).
  //  - kUntilNextCall: the receive pass an application thread runs (Engine::poll_from_app). The
  //    ACKs it produces leave with what the application posts next — typically its reply — in
  //    one burst (one sendmmsg, one DPDK tx burst) instead of two, and the peer takes both in
  //    one receive. Its next post or poll flushes them.
  //  - kUntilPost: a pass (the application's or the engine's) that took an RC WRITE ending a
  //    message without immediate data, when the application answered the last such WRITE with a
  //    post (Progress::on_engine_pass, on_app_silent_write). Its target learns of it by watching
  //    memory, never from a CQ, so only its next post shows that it reacted: ACKs only are held (a
  //    queue with anything else is sent), apart from the rest, and neither its polls nor the
  //    engine's other passes flush them. They leave behind the first burst that ends a message (the
  //    reply; one longer than the send window keeps them through its first windows), for at most
  //    kMaxHoldNs, or kMaxReplyHoldNs once a reply is under way (Engine::run says why:
  //    ib_write_lat) — or, held by the application's own pass and the application then silent
  //    altogether, until the engine thread next runs (when the application's guard lapses:
  //    Engine::guarded_, 1-4 ms): arming its timer on every such pass would cost a system call a
  //    round trip.
  enum class Hold : uint8_t { kOff, kUntilNextCall, kUntilPost };
  static constexpr size_t kMaxHeld = 8;
  // An ACK held longer delays the peer's send completion more than sharing a burst saves; and a
  // peer's ACK timeout is 4.096 us × 2^Timeout (ibv_modify_qp(3)), so a QP with Timeout 6 or more
  // (perftest and most programs use 14) never retries over a held ACK.
  static constexpr transport::Time kMaxHoldNs = 200'000;
  // While the reply goes a window at a time: long enough for a few windows (ib_write_lat -s 512K
  // over memif: ~0.6 ms), short of a Timeout 8 peer's ACK timeout (1.05 ms) and far below the
  // early-retransmit probe's 5 ms floor.
  static constexpr transport::Time kMaxReplyHoldNs = 1'000'000;
  void set_hold(Hold h) { hold_ = h; }
  // The next flush sends the ACKs held for a post (the engine: the application is not about, or
  // their limit passed). Device lock.
  void release_post_hold() { release_post_ = true; }
  // Sends what is held, those waiting for a post too: the application made a call that is
  // neither a post nor a poll (Device::app_call). Device lock.
  void send_held(transport::Time now) {
    release_post_ = true;
    tx_flush(now);
  }
  // From when an application's poll flushes the held packets (transport::kNever when none are
  // held): at once, but those waiting for a post (kUntilPost) at their limit. Any thread, no lock
  // (a hint: a thread that may be the next to act takes the device lock and flushes).
  transport::Time hold_deadline() const { return flush_by_.load(std::memory_order_relaxed); }
  bool holding() const { return hold_deadline() != transport::kNever; }
  // Packets wait for the application's next post (kUntilPost); a pass of the engine's keeps them
  // until hold_limit(). Device lock.
  bool held_for_post() const { return !post_.empty(); }
  // When the held packets' wait ends (kNever when none are held). Device lock.
  transport::Time hold_limit() const {
    transport::Time t = held_n_ != 0 ? held_since_ + kMaxHoldNs : transport::kNever;
    return post_.empty() ? t : std::min(t, post_limit());
  }
  // Whether packets other than ACKs (requests: a post's work; or READ responses) left since the
  // last take_sent_data() — which returns it and starts over. Device lock.
  bool take_sent_data() { return std::exchange(sent_data_, false); }
  // Returns an allocated-but-uncommitted buffer to the port.
  void tx_abort(transport::TxBuf* buf) { port_->tx_free(buf); }

  // Multicast, passed to the port (EOPNOTSUPP where it has none).
  int join_group(uint32_t group) override { return port_->join_group(group); }
  void leave_group(uint32_t group) override { port_->leave_group(group); }

  // When fault injection holds datagrams back (delay, reordering), rx_burst() / tx_flush() must
  // run again by this time even if nothing else happens; kNever when nothing is held.
  // rx_fault_deadline() needs the receive lock, tx_fault_deadline() the device lock,
  // fault_deadline() (both directions) both.
  transport::Time rx_fault_deadline() const;
  transport::Time tx_fault_deadline() const;
  transport::Time fault_deadline() const;

 private:
  Datapath(std::unique_ptr<Port> port, const DatapathOptions& opt, DeviceCounters& counters);
  // The checks of one datagram, appending what passes to rx_out_.
  void accept(const uint8_t* data, size_t len, const RxFrame& meta);
  // Whether queue_[from, to) holds RC ACKs (and NAKs) only.
  bool only_acks(size_t from, size_t to) const;
  // The framing the ICRC of `b` covers (after the port's tx_prepare), on an IPv4 device.
  wire::Ipv4UdpFraming tx_framing(const transport::TxBuf& b) const;
  // The ICRC of RoCEv2 packet `b` in its device's family's framing.
  uint32_t tx_icrc(const transport::TxBuf& b, std::span<const uint8_t> ext) const;
  static uint8_t tos_of(const transport::TxBuf& b) { return uint8_t(b.dscp << 2 | (b.ecn & 3)); }
  // tx_flush() with transmit faults on.
  size_t tx_flush_faulty(transport::Time now);
  // Writes a packet leaving (its ICRC at `icrc`) to the capture, as an IPv4 or IPv6 datagram.
  void capture_tx(const transport::TxBuf& b, const uint8_t* icrc);
  // Lets the queued ACKs ride on their QPs' requests (transport::ride_acks) and gives their
  // buffers back to the port. Returns how many rode.
  size_t ride_acks();
  // Sends injector output, copying it into port buffers as they free up.
  void send_frames(std::vector<FaultFrame>& frames);

  PortEvents events_;  // the port's event sink: declared first, so it outlives the port
  std::unique_ptr<Port> port_;
  DatapathOptions opt_;
  DeviceCounters& counters_;
  // Fault injection, null when the direction has no faults configured (the datapath is then
  // exactly the fault-free one). rx_frames_ holds the datagrams of the last rx_burst() when the
  // receive injector is on: rx_out_ points into them until the next rx_burst().
  std::unique_ptr<FaultInjector> rx_faults_, tx_faults_;
  std::vector<FaultFrame> rx_frames_, tx_frames_;
  std::unique_ptr<PcapWriter> pcap_;  // null when not capturing
  // The port's address (Port::ip(), fixed when it opens) and its family: packets go to this
  // family only (tx_commit), and their ICRC is computed in its framing.
  wire::IpAddr local_ip_{};
  bool local_v6_ = false;
  IpIdGuard id_guard_;  // ports that cannot see the IP ID (receive side)
  std::vector<RxPacket> rx_out_;
  std::vector<transport::TxBuf*> queue_;  // committed, in commit order
  // queue_ holds a packet whose payload is by reference: the flush sends everything (holding
  // would keep a pointer into memory the application may release once the lock is dropped).
  bool ext_queued_ = false;
  Hold hold_ = Hold::kOff;               // set_hold(); device lock
  size_t held_n_ = 0;                    // queue_[0, held_n_) are held until the next call
  transport::Time held_since_ = 0;       // when the first of them was held (held_n_ != 0)
  std::vector<transport::TxBuf*> post_;  // ACKs held for a post (Hold::kUntilPost)
  std::vector<transport::TxBuf*> rode_;  // ride_acks(): ACK buffers that rode, back to the port
  transport::Time post_since_ = 0;       // when the first of them was held
  bool replying_ = false;      // a burst that ended inside a message kept them (kMaxReplyHoldNs)
  bool release_post_ = false;  // release_post_hold()
  transport::Time post_limit() const {
    return post_since_ + (replying_ ? kMaxReplyHoldNs : kMaxHoldNs);
  }
  void update_flush_by();                                     // flush_by_ from the held packets
  bool sent_data_ = false;                                    // take_sent_data()
  std::atomic<transport::Time> flush_by_{transport::kNever};  // hold_deadline()
};

}  // namespace uroce
