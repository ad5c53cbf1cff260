#include "cm/mad.h"

#include <algorithm>
#include <concepts>
#include <cstring>
#include <type_traits>

namespace uroce::cm {

const char* attr_name(AttrId id) {
  switch (id) {
    case AttrId::kClassPortInfo:
      return "ClassPortInfo";
    case AttrId::kReq:
      return "REQ";
    case AttrId::kMra:
      return "MRA";
    case AttrId::kRej:
      return "REJ";
    case AttrId::kRep:
      return "REP";
    case AttrId::kRtu:
      return "RTU";
    case AttrId::kDreq:
      return "DREQ";
    case AttrId::kDrep:
      return "DREP";
    case AttrId::kSidrReq:
      return "SIDR_REQ";
    case AttrId::kSidrRep:
      return "SIDR_REP";
    case AttrId::kLap:
      return "LAP";
    case AttrId::kApr:
      return "APR";
  }
  return "?";
}

uint64_t Field::get(const uint8_t* msg) const {
  uint64_t v = 0;
  for (size_t i = 0; i < len(); ++i) v = (v << 8) | msg[byte + i];
  v >>= shift;
  return bits >= 64 ? v : v & ((uint64_t{1} << bits) - 1);
}

void Field::set(uint8_t* msg, uint64_t v) const {
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  uint64_t word = 0;
  for (size_t i = 0; i < len(); ++i) word = (word << 8) | msg[byte + i];
  word = (word & ~(mask << shift)) | ((v & mask) << shift);
  for (size_t i = len(); i-- > 0;) {
    msg[byte + i] = static_cast<uint8_t>(word);
    word >>= 8;
  }
}

namespace {

void put_be(uint8_t* p, uint64_t v, size_t n) {
  for (size_t i = n; i-- > 0;) {
    p[i] = static_cast<uint8_t>(v);
    v >>= 8;
  }
}

uint64_t get_be(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// Starts a CM MAD: zeroes it and writes the common header.
uint8_t* begin(Mad& out, AttrId attr, uint64_t tid) {
  out.fill(0);
  auto* w = reinterpret_cast<CmMadWire*>(out.data());
  w->hdr.base_version = kMadBaseVersion;
  w->hdr.mgmt_class = kCmMgmtClass;
  w->hdr.class_version = kCmClassVersion;
  w->hdr.method = kMadMethodSend;
  put_be(w->hdr.tid, tid, 8);
  put_be(w->hdr.attr_id, static_cast<uint16_t>(attr), 2);
  return w->msg;
}

}  // namespace

bool parse_header(std::span<const uint8_t> mad, MadHeader* out) {
  if (mad.size() < kMadBytes) return false;
  const auto* w = reinterpret_cast<const CmMadWire*>(mad.data());
  MadHeader h;
  h.base_version = w->hdr.base_version;
  h.mgmt_class = w->hdr.mgmt_class;
  h.class_version = w->hdr.class_version;
  h.method = w->hdr.method;
  h.status = static_cast<uint16_t>(get_be(w->hdr.status, 2));
  h.tid = get_be(w->hdr.tid, 8);
  h.attr_id = static_cast<uint16_t>(get_be(w->hdr.attr_id, 2));
  h.attr_mod = static_cast<uint32_t>(get_be(w->hdr.attr_mod, 4));
  if (out) *out = h;
  return h.base_version == kMadBaseVersion && h.mgmt_class == kCmMgmtClass &&
         h.class_version == kCmClassVersion && h.method == kMadMethodSend;
}

namespace {

// The two walks over a message's field table (`fields` below): `Writer` puts each member into
// its field (a value wider than its field is masked: the IBTA leaves it no room), `Reader` takes
// it back out.
struct Writer {
  Mad& out;
  uint64_t tid;
  bool fits = true;  // false once a variable part was longer than its field
  uint8_t* msg() { return reinterpret_cast<CmMadWire*>(out.data())->msg; }

  void operator()(AttrId attr) { begin(out, attr, tid); }
  void operator()(Field f, const auto& member) { f.set(msg(), static_cast<uint64_t>(member)); }
  void operator()(Bytes b, const Gid& gid) { std::memcpy(msg() + b.byte, gid.data(), b.len); }
  // Variable-length data (private data): up to its field's length; the rest stays zero.
  void operator()(Bytes b, const std::vector<uint8_t>& v) {
    if (v.size() > b.len) {
      fits = false;
    } else if (!v.empty()) {
      std::memcpy(msg() + b.byte, v.data(), v.size());
    }
  }
  // Variable-length data whose length has a field of its own (REJ's ARI).
  void operator()(Field len, Bytes b, const std::vector<uint8_t>& v) {
    (*this)(b, v);
    len.set(msg(), v.size());
  }
};

struct Reader {
  const uint8_t* msg;

  void operator()(AttrId) const {}  // the header was parsed by parse_header
  template <class T>
  void operator()(Field f, T& member) const {
    member = static_cast<T>(f.get(msg));
  }
  void operator()(Bytes b, Gid& gid) const { std::memcpy(gid.data(), msg + b.byte, b.len); }
  // Private data comes back at its field's full length, as the kernel's CM reports it.
  void operator()(Bytes b, std::vector<uint8_t>& v) const {
    v.assign(msg + b.byte, msg + b.byte + b.len);
  }
  void operator()(Field len, Bytes b, std::vector<uint8_t>& v) const {
    const size_t n = std::min<size_t>(len.get(msg), b.len);
    v.assign(msg + b.byte, msg + b.byte + n);
  }
};

// `m` is the message, const to encode, not to decode.
template <class M, class Msg>
concept MessageOf = std::same_as<std::remove_const_t<M>, Msg>;

// Each message's field table: its attribute ID, then the IBTA table in order — `{byte, bits,
// shift}` (see `Field`) or a byte range, and the member it holds. Fields the struct has no member
// for are zero and named in comments.

// REQ, IBTA 12.6.5 (table 109).
void fields(MessageOf<Req> auto& m, auto& io) {
  io(AttrId::kReq);
  io({0, 32, 0}, m.local_comm_id);
  io({8, 64, 0}, m.service_id);
  io({16, 64, 0}, m.local_ca_guid);
  io({28, 32, 0}, m.local_qkey);
  io({32, 24, 8}, m.local_qpn);
  io({35, 8, 0}, m.responder_resources);
  // 36..38: Local EECN; 40..42: Remote EECN.
  io({39, 8, 0}, m.initiator_depth);
  io({43, 5, 3}, m.remote_cm_response_timeout);
  io({43, 2, 1}, m.transport_service_type);
  io({43, 1, 0}, m.end_to_end_flow_control);
  io({44, 24, 8}, m.starting_psn);
  io({47, 5, 3}, m.local_cm_response_timeout);
  io({47, 3, 0}, m.retry_count);
  io({48, 16, 0}, m.pkey);
  io({50, 4, 4}, m.path_mtu);
  // {50, 1, 3}: RDC Exists.
  io({50, 3, 0}, m.rnr_retry_count);
  io({51, 4, 4}, m.max_cm_retries);
  io({51, 1, 3}, m.srq);
  // {51, 3, 0}: Extended Transport Type. Then the primary path, 52..95; the alternate path
  // (96..139, the same shape) stays zero: uroce offers none.
  auto& a = m.primary;
  io({52, 16, 0}, a.local_lid);
  io({54, 16, 0}, a.remote_lid);
  io(Bytes{56, 16}, a.local_gid);
  io(Bytes{72, 16}, a.remote_gid);
  io({88, 20, 12}, a.flow_label);
  io({91, 6, 0}, a.packet_rate);
  io({92, 8, 0}, a.traffic_class);
  io({93, 8, 0}, a.hop_limit);
  io({94, 4, 4}, a.sl);
  io({94, 1, 3}, a.subnet_local);
  io({95, 5, 3}, a.local_ack_timeout);
  io(req::kPrivateData, m.private_data);
}

// MRA, 12.6.6 (table 110).
void fields(MessageOf<Mra> auto& m, auto& io) {
  io(AttrId::kMra);
  io({0, 32, 0}, m.local_comm_id);
  io({4, 32, 0}, m.remote_comm_id);
  io({8, 2, 6}, m.message_mraed);
  io({9, 5, 3}, m.service_timeout);
  io(mra::kPrivateData, m.private_data);
}

// REJ, 12.6.7 (table 111): the ARI's length is the Reject Info Length, {9, 7, 1}.
void fields(MessageOf<Rej> auto& m, auto& io) {
  io(AttrId::kRej);
  io({0, 32, 0}, m.local_comm_id);
  io({4, 32, 0}, m.remote_comm_id);
  io({8, 2, 6}, m.message_rejected);
  io({10, 16, 0}, m.reason);
  io({9, 7, 1}, rej::kAri, m.ari);
  io(rej::kPrivateData, m.private_data);
}

// REP, 12.6.8 (table 113).
void fields(MessageOf<Rep> auto& m, auto& io) {
  io(AttrId::kRep);
  io({0, 32, 0}, m.local_comm_id);
  io({4, 32, 0}, m.remote_comm_id);
  io({8, 32, 0}, m.local_qkey);
  io({12, 24, 8}, m.local_qpn);
  // 16..18: Local EECN.
  io({20, 24, 8}, m.starting_psn);
  io({24, 8, 0}, m.responder_resources);
  io({25, 8, 0}, m.initiator_depth);
  io({26, 5, 3}, m.target_ack_delay);
  io({26, 2, 1}, m.failover_accepted);
  io({26, 1, 0}, m.end_to_end_flow_control);
  io({27, 3, 5}, m.rnr_retry_count);
  io({27, 1, 4}, m.srq);
  io({28, 64, 0}, m.local_ca_guid);
  io(rep::kPrivateData, m.private_data);
}

// RTU 12.6.9, DREQ 12.6.10 and DREP 12.6.11: the two communication IDs; DREQ adds the QPN.
void fields(MessageOf<Rtu> auto& m, auto& io) {
  io(AttrId::kRtu);
  io({0, 32, 0}, m.local_comm_id);
  io({4, 32, 0}, m.remote_comm_id);
  io(rtu::kPrivateData, m.private_data);
}
void fields(MessageOf<Dreq> auto& m, auto& io) {
  io(AttrId::kDreq);
  io({0, 32, 0}, m.local_comm_id);
  io({4, 32, 0}, m.remote_comm_id);
  io({8, 24, 8}, m.remote_qpn);
  io(dreq::kPrivateData, m.private_data);
}
void fields(MessageOf<Drep> auto& m, auto& io) {
  io(AttrId::kDrep);
  io({0, 32, 0}, m.local_comm_id);
  io({4, 32, 0}, m.remote_comm_id);
  io(drep::kPrivateData, m.private_data);
}

// SIDR REQ, 12.11.1 (table 119).
void fields(MessageOf<SidrReq> auto& m, auto& io) {
  io(AttrId::kSidrReq);
  io({0, 32, 0}, m.request_id);
  io({4, 16, 0}, m.pkey);
  io({8, 64, 0}, m.service_id);
  io(sidr_req::kPrivateData, m.private_data);
}

// SIDR REP, 12.11.2 (table 120). {5, 8, 0}, Additional Information Length, and the ClassPortInfo
// of a redirect (24..95) stay zero: uroce does not redirect.
void fields(MessageOf<SidrRep> auto& m, auto& io) {
  io(AttrId::kSidrRep);
  io({0, 32, 0}, m.request_id);
  io({4, 8, 0}, m.status);
  io({8, 24, 8}, m.qpn);
  io({12, 64, 0}, m.service_id);
  io({20, 32, 0}, m.qkey);
  io(sidr_rep::kPrivateData, m.private_data);
}

template <class Msg>
bool encode_as(const Msg& m, uint64_t tid, Mad& out) {
  Mad mad;  // `out` is untouched when a variable part does not fit
  Writer w{mad, tid};
  fields(m, w);
  if (w.fits) out = mad;
  return w.fits;
}

template <class Msg>
Msg decode_as(const uint8_t* msg) {
  Msg m;
  Reader r{msg};
  fields(m, r);
  return m;
}

}  // namespace

bool encode(const Req& m, uint64_t tid, Mad& out) {
  return encode_as(m, tid, out);
}
bool encode(const Mra& m, uint64_t tid, Mad& out) {
  return encode_as(m, tid, out);
}
bool encode(const Rej& m, uint64_t tid, Mad& out) {
  return encode_as(m, tid, out);
}
bool encode(const Rep& m, uint64_t tid, Mad& out) {
  return encode_as(m, tid, out);
}
bool encode(const Rtu& m, uint64_t tid, Mad& out) {
  return encode_as(m, tid, out);
}
bool encode(const Dreq& m, uint64_t tid, Mad& out) {
  return encode_as(m, tid, out);
}
bool encode(const Drep& m, uint64_t tid, Mad& out) {
  return encode_as(m, tid, out);
}
bool encode(const SidrReq& m, uint64_t tid, Mad& out) {
  return encode_as(m, tid, out);
}
bool encode(const SidrRep& m, uint64_t tid, Mad& out) {
  return encode_as(m, tid, out);
}

Req decode_req(const uint8_t* msg) {
  return decode_as<Req>(msg);
}
Mra decode_mra(const uint8_t* msg) {
  return decode_as<Mra>(msg);
}
Rej decode_rej(const uint8_t* msg) {
  return decode_as<Rej>(msg);
}
Rep decode_rep(const uint8_t* msg) {
  return decode_as<Rep>(msg);
}
Rtu decode_rtu(const uint8_t* msg) {
  return decode_as<Rtu>(msg);
}
Dreq decode_dreq(const uint8_t* msg) {
  return decode_as<Dreq>(msg);
}
Drep decode_drep(const uint8_t* msg) {
  return decode_as<Drep>(msg);
}
SidrReq decode_sidr_req(const uint8_t* msg) {
  return decode_as<SidrReq>(msg);
}
SidrRep decode_sidr_rep(const uint8_t* msg) {
  return decode_as<SidrRep>(msg);
}

uint64_t cm_timeout_ns(uint8_t value) {
  // 4.096 µs = 4096 ns.
  return uint64_t{4096} << std::min<uint8_t>(value, 31);
}

const char* rej_reason_text(uint16_t reason) {
  switch (static_cast<RejReason>(reason)) {
    case RejReason::kNoQp:
      return "the peer has no QP for it";
    case RejReason::kNoResources:
      return "the peer is out of resources";
    case RejReason::kTimeout:
      return "the peer timed out";
    case RejReason::kUnsupportedReq:
      return "the peer does not support the request";
    case RejReason::kInvalidCommId:
      return "the peer does not know the connection";
    case RejReason::kInvalidServiceId:
      return "nobody listens on that port there (server not started, or not listening yet)";
    case RejReason::kInvalidTransportType:
      return "the peer does not serve that transport type";
    case RejReason::kStaleConnection:
      return "the peer holds a stale connection with the same QP";
    case RejReason::kInvalidMtu:
      return "the path MTU is not one the peer takes";
    case RejReason::kConsumerReject:
      return "the peer's program rejected it (rdma_reject)";
    case RejReason::kDuplicateLocalCommId:
      return "the peer has a connection with the same communication ID";
    case RejReason::kInvalidClassVersion:
      return "the peer speaks another CM class version";
  }
  return "see IBTA 12.6.7, table 112";
}

}  // namespace uroce::cm
