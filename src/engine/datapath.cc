#include "engine/datapath.h"

#include <algorithm>
#include <cstring>

#include "util/log.h"
#include "transport/ack_rider.h"
#include "wire/icrc.h"

namespace uroce {
namespace {

// The transmit injector draws from its own stream, so adding transmit faults does not change
// which received datagrams the receive side drops for a seed.
constexpr uint64_t kTxSeedSalt = 0x7478'6661'756c'7473ull;  // "txfaults"

void count_parse_error(DeviceCounters& c, wire::ParseError e) {
  switch (e) {
    case wire::ParseError::kTooShort:
      c.rx_parse_too_short.add();
      break;
    case wire::ParseError::kBadOpcode:
      c.rx_parse_bad_opcode.add();
      break;
    case wire::ParseError::kBadVersion:
      c.rx_parse_bad_version.add();
      break;
    case wire::ParseError::kBadPad:
      c.rx_parse_bad_pad.add();
      break;
    case wire::ParseError::kBadLength:
      c.rx_parse_bad_length.add();
      break;
    case wire::ParseError::kOk:
      break;
    default:
      c.rx_parse_other.add();
      break;  // a cause added to wire.h after this list
  }
}

}  // namespace

Datapath::Datapath(std::unique_ptr<Port> port, const DatapathOptions& opt, DeviceCounters& counters)
    : events_(port->describe()), port_(std::move(port)), opt_(opt), counters_(counters) {
  rx_out_.reserve(64);
  local_ip_ = port_->ip();
  local_v6_ = !local_ip_.is_v4();
  port_->set_event_sink(&events_);
  FaultSpec rx = opt.faults.rx_spec();
  if (rx.enabled())
    rx_faults_ = std::make_unique<FaultInjector>(
        rx, opt.faults.seed,
        FaultCounterRefs{&counters.fault_drops, &counters.fault_rx_burst_drops,
                         &counters.fault_rx_corrupted, &counters.fault_rx_duplicated,
                         &counters.fault_rx_reordered, &counters.fault_rx_delayed,
                         &counters.fault_rx_queue_marked, &counters.fault_rx_queue_drops,
                         &counters.fault_rx_queue_below_kmin, &counters.fault_rx_queue_in_ramp,
                         &counters.fault_rx_queue_above_kmax, &counters.fault_rx_ce_set});
  if (opt.faults.tx.enabled())
    tx_faults_ = std::make_unique<FaultInjector>(
        opt.faults.tx, opt.faults.seed ^ kTxSeedSalt,
        FaultCounterRefs{&counters.fault_tx_drops, &counters.fault_tx_burst_drops,
                         &counters.fault_tx_corrupted, &counters.fault_tx_duplicated,
                         &counters.fault_tx_reordered, &counters.fault_tx_delayed});
}

std::unique_ptr<Datapath> Datapath::open(std::unique_ptr<Port> port, const DatapathOptions& opt,
                                         DeviceCounters& counters, std::string* err) {
  std::unique_ptr<Datapath> d(new Datapath(std::move(port), opt, counters));
  if (!opt.pcap_path.empty()) {
    // Raw IP datagrams of the device's family (pcap.h).
    d->pcap_ =
        PcapWriter::open(opt.pcap_path, err,
                         d->local_v6_ ? PcapWriter::LinkType::kIpv6 : PcapWriter::LinkType::kIpv4);
    if (!d->pcap_) return nullptr;
  }
  if (!d->tx_faults_ && !d->pcap_) d->set_tx_gather_min(d->port_->caps().tx_gather_min);
  return d;
}

Datapath::~Datapath() {
  for (transport::TxBuf* b : queue_) port_->tx_free(b);
  queue_.clear();
  for (transport::TxBuf* b : post_) port_->tx_free(b);
  post_.clear();
  if (tx_faults_) {
    tx_frames_.clear();
    tx_faults_->release_due(transport::kNever, tx_frames_);
    send_frames(tx_frames_);
  }
}

transport::Time Datapath::tx_fault_deadline() const {
  return tx_faults_ ? tx_faults_->next_deadline() : transport::kNever;
}

transport::Time Datapath::rx_fault_deadline() const {
  return rx_faults_ ? rx_faults_->next_deadline() : transport::kNever;
}

transport::Time Datapath::fault_deadline() const {
  return std::min(rx_fault_deadline(), tx_fault_deadline());
}

std::span<const RxPacket> Datapath::rx_burst(transport::Time now) {
  rx_out_.clear();
  rx_frames_.clear();  // the last batch's packets pointed into these
  std::span<const RxFrame> frames = port_->rx_burst();
  for (const RxFrame& f : frames) {
    counters_.rcvd_pkts.add();
    counters_.rcvd_bytes.add(f.len);
    if (!rx_faults_) {
      accept(f.data, f.len, f);
      continue;
    }
    // Fault injection before any check, so that a seed drops the same arrivals whatever they
    // contain, and corruption is caught by the ICRC check like corruption on the wire.
    FaultFrame fr;
    fr.bytes.assign(f.data, f.data + f.len);
    fr.addr = f.src_ip;
    fr.local = f.dst_ip;
    fr.port = f.src_port;
    fr.local_port = f.dst_port;
    fr.tos = f.tos;
    fr.ip_id_known = f.ip_id_known;
    fr.dont_fragment = f.dont_fragment;
    fr.ip_id = f.ip_id;
    fr.truncated = f.truncated;
    fr.roce_v1 = f.roce_v1;
    rx_faults_->offer(std::move(fr), now, rx_frames_);
  }
  if (rx_faults_) {
    rx_faults_->release_due(now, rx_frames_);
    // rx_frames_ is complete now: rx_out_ may point into it.
    for (const FaultFrame& fr : rx_frames_) {
      RxFrame meta;
      meta.truncated = fr.truncated;
      meta.src_ip = fr.addr;
      meta.dst_ip = fr.local;
      meta.src_port = fr.port;
      meta.dst_port = fr.local_port;
      meta.tos = fr.tos;
      meta.ip_id_known = fr.ip_id_known;
      meta.dont_fragment = fr.dont_fragment;
      meta.ip_id = fr.ip_id;
      meta.roce_v1 = fr.roce_v1;
      accept(fr.bytes.data(), fr.bytes.size(), meta);
    }
  }
  return rx_out_;
}

void Datapath::accept(const uint8_t* buf, size_t len, const RxFrame& meta) {
  // Longer than any packet: no packet of ours (a port's buffers may be larger than this, e.g.
  // for GRO, so the port does not always flag it).
  if (meta.truncated || len > kMaxDatagram) {
    counters_.rx_truncated.add();
    return;
  }
  if (len < wire::kBthBytes + wire::kIcrcBytes) {
    counters_.rx_too_short.add();
    return;
  }
  const size_t ib_len = len - wire::kIcrcBytes;
  const uint32_t received = wire::load_le32(buf + ib_len);
  // IPv4 underneath (IPv4-mapped addresses): the IPv4 framing, its ICRC and the IP ID guard keep
  // host-order IPv4 addresses. Anything else came over IPv6, where the ICRC is exact.
  const bool v4 = meta.src_ip.is_v4() && meta.dst_ip.is_v4();
  wire::Ipv4UdpFraming f;
  f.src_ip = meta.src_ip.v4();
  f.dst_ip = meta.dst_ip.v4();
  f.src_port = meta.src_port;
  f.dst_port = meta.dst_port;
  bool icrc_ok;
  bool suspect = false;  // valid only under an ID this source never uses (ip_id_guard.h)
  if (meta.roce_v1) {
    // uroce's RoCE v1 GIDs are IPv4-mapped (the DPDK port hands in no others).
    icrc_ok = v4 && wire::icrc_grh(f.src_ip, f.dst_ip, {buf, ib_len}) == received;
  } else if (!v4) {
    const wire::Ipv6UdpFraming f6{meta.src_ip, meta.dst_ip, meta.src_port, meta.dst_port};
    icrc_ok = wire::icrc(f6, {buf, ib_len}) == received;
  } else if (meta.ip_id_known) {
    f.ip_id = meta.ip_id;
    f.dont_fragment = meta.dont_fragment;
    icrc_ok = wire::icrc(f, {buf, ib_len}) == received;
  } else {
    // DF assumed set, as every RoCEv2 sender sets it.
    f.dont_fragment = true;
    icrc_ok = wire::icrc_matches_some_ip_id(f, {buf, ib_len}, received, &f.ip_id);
    suspect = icrc_ok && !id_guard_.accept(f.src_ip, f.ip_id);
  }
  if (pcap_ && !meta.roce_v1 && v4 != local_v6_) {
    // Captured with the IP ID that makes the ICRC valid, so the record is the packet as sent;
    // a packet no ID validates is written with ID 0, and its ICRC shows as bad. (RoCE v1 frames
    // are not written, nor datagrams of the other family: capture the interface.)
    if (v4)
      pcap_->write(f, meta.tos, {buf, ib_len}, buf + ib_len);
    else
      pcap_->write6({meta.src_ip, meta.dst_ip, meta.src_port, meta.dst_port}, meta.tos,
                    {buf, ib_len}, buf + ib_len);
  }
  if (!icrc_ok || suspect) {
    counters_.rcvd_icrc_err.add();
    if (suspect) counters_.rx_icrc_suspect.add();
    return;
  }
  RxPacket& out = rx_out_.emplace_back();
  wire::ParseError pe = wire::parse({buf, ib_len}, out.pkt);
  if (pe != wire::ParseError::kOk) {
    count_parse_error(counters_, pe);
    rx_out_.pop_back();
    return;
  }
  if (out.pkt.has_rider) counters_.rx_ack_riders.add();
  out.info.src_ip = meta.src_ip;
  out.info.dst_ip = meta.dst_ip;
  out.info.src_port = meta.src_port;
  out.info.ecn = meta.tos & 3;
  out.info.roce_v1 = meta.roce_v1;
  out.ip_id = f.ip_id;
  if (f.ip_id != 0) counters_.rx_foreign_ip_id.add();
  if (out.info.ecn == transport::kEcnCe) counters_.rcvd_ecn_ce.add();
}

transport::TxBuf* Datapath::tx_alloc() {
  transport::TxBuf* b = port_->tx_alloc();
  if (b) b->ext_len = 0;  // a port may hand a buffer back as it left it (ext unused at 0)
  return b;
}

void Datapath::tx_commit(transport::TxBuf* buf) {
  // A length no packet has is a transport bug: refuse it rather than send garbage or read
  // outside the buffer.
  // RoCE v1 on a port without Ethernet framing cannot be sent (the verbs offer no v1 GID there).
  // A destination of the other family than the device address's (an IPv6 GID's from an IPv4
  // device, an IPv4-mapped one from an IPv6 device) is unroutable: a device's sockets are of its
  // own family. Counted as the kernel's refusal of an unroutable send is.
  const bool family_mismatch = buf->dst_ip.is_v4() == local_v6_;
  if (buf->len < wire::kBthBytes || buf->ib_len() > transport::kMaxIbPacket ||
      (buf->ext_len != 0 && buf->ext == nullptr) || (buf->roce_v1 && !port_->caps().roce_v1) ||
      family_mismatch) {
    if (family_mismatch && log().should_log(spdlog::level::debug))
      log().debug("{}: dropped a packet for {}: {} destination from an {} device (tx_errors)",
                  port_->describe(), buf->dst_ip.to_string(), local_v6_ ? "an IPv4" : "an IPv6",
                  local_v6_ ? "IPv6" : "IPv4");
    counters_.port.tx_errors.add();
    port_->tx_free(buf);
    return;
  }
  if (buf->ext_len != 0) {
    if (tx_gather_min() == 0) {
      // This port (or the faults or capture on it) wants the packet in one piece.
      std::memcpy(buf->data + buf->len, buf->ext, buf->ext_len);
      buf->len += buf->ext_len;
      buf->ext = nullptr;
      buf->ext_len = 0;
    } else {
      ext_queued_ = true;
    }
  }
  if (buf->dscp == transport::kDscpPortDefault) buf->dscp = opt_.data_dscp;
  queue_.push_back(buf);
}

bool Datapath::only_acks(size_t from, size_t to) const {
  return std::all_of(queue_.begin() + static_cast<ptrdiff_t>(from),
                     queue_.begin() + static_cast<ptrdiff_t>(to),
                     [](const transport::TxBuf* b) { return wire::is_acknowledge(b->data[0]); });
}

void Datapath::capture_tx(const transport::TxBuf& b, const uint8_t* icrc) {
  if (local_v6_)
    pcap_->write6({local_ip_, b.dst_ip, b.src_port, port_->udp_dst_port()}, tos_of(b),
                  {b.data, b.len}, icrc);
  else
    pcap_->write(tx_framing(b), tos_of(b), {b.data, b.len}, icrc);
}

wire::Ipv4UdpFraming Datapath::tx_framing(const transport::TxBuf& b) const {
  wire::Ipv4UdpFraming f;
  f.src_ip = local_ip_.v4();
  f.dst_ip = b.dst_ip.v4();  // IPv4-mapped (tx_commit)
  f.ip_id = b.ip_id;
  f.dont_fragment = true;
  f.src_port = b.src_port;
  f.dst_port = port_->udp_dst_port();
  return f;
}

uint32_t Datapath::tx_icrc(const transport::TxBuf& b, std::span<const uint8_t> ext) const {
  if (local_v6_) {
    const wire::Ipv6UdpFraming f6{local_ip_, b.dst_ip, b.src_port, port_->udp_dst_port()};
    return wire::icrc(f6, {b.data, b.len}, ext);
  }
  return wire::icrc(tx_framing(b), {b.data, b.len}, ext);
}

namespace {

// Whether `b` is a SEND or WRITE packet that neither ends nor is its whole message.
bool continues_message(const transport::TxBuf& b) {
  switch (wire::Opcode(b.data[0])) {
    case wire::Opcode::kRcSendFirst:
    case wire::Opcode::kRcSendMiddle:
    case wire::Opcode::kRcWriteFirst:
    case wire::Opcode::kRcWriteMiddle:
    case wire::Opcode::kUcSendFirst:
    case wire::Opcode::kUcSendMiddle:
    case wire::Opcode::kUcWriteFirst:
    case wire::Opcode::kUcWriteMiddle:
    case wire::Opcode::kXrcSendFirst:
    case wire::Opcode::kXrcSendMiddle:
    case wire::Opcode::kXrcWriteFirst:
    case wire::Opcode::kXrcWriteMiddle:
      return true;
    default:
      return false;
  }
}

}  // namespace

void Datapath::update_flush_by() {
  transport::Time t = held_n_ != 0 ? held_since_ : transport::kNever;
  if (!post_.empty()) t = std::min(t, post_limit());
  flush_by_.store(t, std::memory_order_relaxed);
}

size_t Datapath::tx_flush(transport::Time now) {
  if (tx_faults_) return tx_flush_faulty(now);
  if (hold_ != Hold::kOff && !queue_.empty() && !ext_queued_) {
    const size_t n = queue_.size();
    if (hold_ == Hold::kUntilPost && only_acks(held_n_, n) &&
        post_.size() + (n - held_n_) <= kMaxHeld) {
      // ACKs for the application's post, kept apart: they also wait through its polls, and
      // through its reply's first windows (below).
      if (post_.empty()) {
        post_since_ = now;
        replying_ = false;
      }
      post_.insert(post_.end(), queue_.begin() + static_cast<ptrdiff_t>(held_n_), queue_.end());
      queue_.resize(held_n_);
      update_flush_by();
      return n;
    }
    if (hold_ == Hold::kUntilNextCall && n <= kMaxHeld) {
      if (held_n_ == 0) held_since_ = now;
      held_n_ = n;
      update_flush_by();
      return n;
    }
  }
  // The ACKs held for a post leave behind the first burst that ends a message — the reply, whole
  // — or at their limit. A burst that ends inside a message (a reply longer than the send window
  // goes a window at a time, each opened by the peer's ACKs) keeps them, so that the peer goes on
  // polling for its completion and takes the rest of the reply in its own passes.
  bool release = false;
  if (!post_.empty()) {
    const auto last_data =
        std::find_if(queue_.rbegin(), queue_.rend(),
                     [](const transport::TxBuf* b) { return !wire::is_acknowledge(b->data[0]); });
    const bool mid_message = last_data != queue_.rend() && continues_message(**last_data);
    if (mid_message) replying_ = true;
    release = release_post_ || now >= post_limit() || (last_data != queue_.rend() && !mid_message);
  }
  release_post_ = false;
  if (queue_.empty() && !release) {
    update_flush_by();
    return 0;
  }
  if (held_n_ != 0 && held_n_ < queue_.size() && only_acks(0, held_n_)) {
    // Held ACKs go after what was queued since (the reply): an ACK is the shortest packet, and a
    // run of packets to one peer may end with a shorter one in one GSO send (UdpPort), so the
    // reply and the ACK share a send and the peer's receive. Their own order, and each QP's
    // order in each direction, are kept (requests and responses have PSN spaces of their own).
    // Not when a pass held other packets too (requests it pumped, READ responses): what was
    // queued since may be the same QP's next PSNs, which must not overtake them.
    std::rotate(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(held_n_), queue_.end());
  }
  if (release) {
    queue_.insert(queue_.end(), post_.begin(), post_.end());  // behind everything
    post_.clear();
  }
  held_n_ = 0;
  update_flush_by();
  const size_t rode = ride_acks();
  port_->tx_prepare(queue_, /*batch=*/true);
  uint64_t gathered = 0;
  for (transport::TxBuf* b : queue_) {
    const std::span<const uint8_t> ext{b->ext, b->ext_len};  // empty unless by reference
    gathered += b->ext_len != 0;
    sent_data_ = sent_data_ || !wire::is_acknowledge(b->data[0]);
    if (b->roce_v1) {
      wire::store_le32(b->data + b->len,
                       wire::icrc_grh(local_ip_.v4(), b->dst_ip.v4(), {b->data, b->len}, ext));
      continue;
    }
    wire::store_le32(b->data + b->len, tx_icrc(*b, ext));
    // Captured as sent: each packet with the IP ID its ICRC was computed for (never by
    // reference: a capture turns gathering off).
    if (pcap_) capture_tx(*b, b->data + b->len);
  }
  size_t sent = port_->tx_burst(queue_);
  queue_.clear();
  if (ext_queued_) counters_.port.tx_gathered.add(gathered);
  ext_queued_ = false;
  return sent + rode;  // an ACK that rides left the queue as surely as its carrier
}

size_t Datapath::ride_acks() {
  if (queue_.size() < 2) return 0;
  rode_.clear();
  queue_.resize(transport::ride_acks(queue_, rode_));
  for (transport::TxBuf* b : rode_) port_->tx_free(b);
  counters_.tx_ack_riders.add(rode_.size());
  return rode_.size();
}

// Each queued packet gets its ICRC, then goes through the injector as one datagram (so
// corruption is caught by the peer's ICRC check), and whatever comes out is sent one datagram at
// a time, each alone (IP ID 0, as the ICRC was computed for).
size_t Datapath::tx_flush_faulty(transport::Time now) {
  tx_frames_.clear();
  tx_faults_->release_due(now, tx_frames_);
  // ACKs ride as on the fault-free path: the injector sees the datagrams that would leave.
  const size_t taken = queue_.size();
  ride_acks();
  if (!queue_.empty()) port_->tx_prepare(queue_, /*batch=*/false);
  for (transport::TxBuf* b : queue_) {
    FaultFrame fr;
    fr.bytes.resize(b->len + wire::kIcrcBytes);
    std::memcpy(fr.bytes.data(), b->data, b->len);
    fr.roce_v1 = b->roce_v1;
    wire::store_le32(fr.bytes.data() + b->len,
                     b->roce_v1 ? wire::icrc_grh(local_ip_.v4(), b->dst_ip.v4(), {b->data, b->len})
                                : tx_icrc(*b, {}));
    // Captured as uroce sent it, before the injected faults (which stand for the wire).
    if (pcap_ && !b->roce_v1) capture_tx(*b, fr.bytes.data() + b->len);
    fr.addr = b->dst_ip;
    fr.port = b->src_port;
    fr.tos = tos_of(*b);
    port_->tx_free(b);
    tx_faults_->offer(std::move(fr), now, tx_frames_);
  }
  queue_.clear();
  send_frames(tx_frames_);
  return taken;
}

void Datapath::send_frames(std::vector<FaultFrame>& frames) {
  std::vector<transport::TxBuf*> burst;
  size_t i = 0;
  while (i < frames.size()) {
    burst.clear();
    for (; i < frames.size(); ++i) {
      const FaultFrame& fr = frames[i];
      if (fr.bytes.size() < wire::kIcrcBytes ||
          fr.bytes.size() > transport::kMaxIbPacket + wire::kIcrcBytes)
        continue;  // cannot happen: the injector keeps lengths
      transport::TxBuf* b = port_->tx_alloc();
      if (!b) break;
      std::memcpy(b->data, fr.bytes.data(), fr.bytes.size());
      b->len = static_cast<uint32_t>(fr.bytes.size() - wire::kIcrcBytes);
      b->dst_ip = fr.addr;
      b->src_port = fr.port;
      b->ecn = fr.tos & 3;
      b->dscp = fr.tos >> 2;
      b->roce_v1 = fr.roce_v1;
      burst.push_back(b);
    }
    if (burst.empty()) break;  // the port has no buffer at all: nothing can be sent
    // Prepared alone: the same socket and IP ID 0 the ICRC in the bytes was computed for (the
    // bytes are not touched, so injected corruption stays).
    port_->tx_prepare(burst, /*batch=*/false);
    port_->tx_burst(burst);
  }
}

}  // namespace uroce
