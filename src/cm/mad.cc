#include "cm/mad.h"

#include <algorithm>
#include <cstring>

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

bool fits(const std::vector<uint8_t>& v, Bytes b) {
  return v.size() <= b.len;
}

void put_bytes(uint8_t* msg, Bytes b, const std::vector<uint8_t>& v) {
  if (!v.empty()) std::memcpy(msg + b.byte, v.data(), std::min<size_t>(v.size(), b.len));
}

std::vector<uint8_t> get_bytes(const uint8_t* msg, Bytes b) {
  return std::vector<uint8_t>(msg + b.byte, msg + b.byte + b.len);
}

void put_gid(uint8_t* msg, Bytes b, const Gid& g) {
  std::memcpy(msg + b.byte, g.data(), 16);
}

Gid get_gid(const uint8_t* msg, Bytes b) {
  Gid g;
  std::memcpy(g.data(), msg + b.byte, 16);
  return g;
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

bool encode(const Req& m, uint64_t tid, Mad& out) {
  if (!fits(m.private_data, req::kPrivateData)) return false;
  uint8_t* p = begin(out, AttrId::kReq, tid);
  using namespace req;
  kLocalCommId.set(p, m.local_comm_id);
  kServiceId.set(p, m.service_id);
  kLocalCaGuid.set(p, m.local_ca_guid);
  kLocalQkey.set(p, m.local_qkey);
  kLocalQpn.set(p, m.local_qpn);
  kResponderResources.set(p, m.responder_resources);
  kInitiatorDepth.set(p, m.initiator_depth);
  kRemoteCmResponseTimeout.set(p, m.remote_cm_response_timeout);
  kTransportServiceType.set(p, m.transport_service_type);
  kEndToEndFlowControl.set(p, m.end_to_end_flow_control);
  kStartingPsn.set(p, m.starting_psn);
  kLocalCmResponseTimeout.set(p, m.local_cm_response_timeout);
  kRetryCount.set(p, m.retry_count);
  kPartitionKey.set(p, m.pkey);
  kPathMtu.set(p, m.path_mtu);
  kRnrRetryCount.set(p, m.rnr_retry_count);
  kMaxCmRetries.set(p, m.max_cm_retries);
  kSrq.set(p, m.srq);
  const PathInfo& a = m.primary;
  kPrimaryLocalLid.set(p, a.local_lid);
  kPrimaryRemoteLid.set(p, a.remote_lid);
  put_gid(p, kPrimaryLocalGid, a.local_gid);
  put_gid(p, kPrimaryRemoteGid, a.remote_gid);
  kPrimaryFlowLabel.set(p, a.flow_label);
  kPrimaryPacketRate.set(p, a.packet_rate);
  kPrimaryTrafficClass.set(p, a.traffic_class);
  kPrimaryHopLimit.set(p, a.hop_limit);
  kPrimarySl.set(p, a.sl);
  kPrimarySubnetLocal.set(p, a.subnet_local);
  kPrimaryLocalAckTimeout.set(p, a.local_ack_timeout);
  put_bytes(p, kPrivateData, m.private_data);
  return true;
}

Req decode_req(const uint8_t* p) {
  using namespace req;
  Req m;
  m.local_comm_id = static_cast<uint32_t>(kLocalCommId.get(p));
  m.service_id = kServiceId.get(p);
  m.local_ca_guid = kLocalCaGuid.get(p);
  m.local_qkey = static_cast<uint32_t>(kLocalQkey.get(p));
  m.local_qpn = static_cast<uint32_t>(kLocalQpn.get(p));
  m.responder_resources = static_cast<uint8_t>(kResponderResources.get(p));
  m.initiator_depth = static_cast<uint8_t>(kInitiatorDepth.get(p));
  m.remote_cm_response_timeout = static_cast<uint8_t>(kRemoteCmResponseTimeout.get(p));
  m.transport_service_type = static_cast<uint8_t>(kTransportServiceType.get(p));
  m.end_to_end_flow_control = kEndToEndFlowControl.get(p);
  m.starting_psn = static_cast<uint32_t>(kStartingPsn.get(p));
  m.local_cm_response_timeout = static_cast<uint8_t>(kLocalCmResponseTimeout.get(p));
  m.retry_count = static_cast<uint8_t>(kRetryCount.get(p));
  m.pkey = static_cast<uint16_t>(kPartitionKey.get(p));
  m.path_mtu = static_cast<uint8_t>(kPathMtu.get(p));
  m.rnr_retry_count = static_cast<uint8_t>(kRnrRetryCount.get(p));
  m.max_cm_retries = static_cast<uint8_t>(kMaxCmRetries.get(p));
  m.srq = kSrq.get(p);
  PathInfo& a = m.primary;
  a.local_lid = static_cast<uint16_t>(kPrimaryLocalLid.get(p));
  a.remote_lid = static_cast<uint16_t>(kPrimaryRemoteLid.get(p));
  a.local_gid = get_gid(p, kPrimaryLocalGid);
  a.remote_gid = get_gid(p, kPrimaryRemoteGid);
  a.flow_label = static_cast<uint32_t>(kPrimaryFlowLabel.get(p));
  a.packet_rate = static_cast<uint8_t>(kPrimaryPacketRate.get(p));
  a.traffic_class = static_cast<uint8_t>(kPrimaryTrafficClass.get(p));
  a.hop_limit = static_cast<uint8_t>(kPrimaryHopLimit.get(p));
  a.sl = static_cast<uint8_t>(kPrimarySl.get(p));
  a.subnet_local = kPrimarySubnetLocal.get(p);
  a.local_ack_timeout = static_cast<uint8_t>(kPrimaryLocalAckTimeout.get(p));
  m.private_data = get_bytes(p, kPrivateData);
  return m;
}

bool encode(const Mra& m, uint64_t tid, Mad& out) {
  if (!fits(m.private_data, mra::kPrivateData)) return false;
  uint8_t* p = begin(out, AttrId::kMra, tid);
  mra::kLocalCommId.set(p, m.local_comm_id);
  mra::kRemoteCommId.set(p, m.remote_comm_id);
  mra::kMessageMraed.set(p, static_cast<uint8_t>(m.message_mraed));
  mra::kServiceTimeout.set(p, m.service_timeout);
  put_bytes(p, mra::kPrivateData, m.private_data);
  return true;
}

Mra decode_mra(const uint8_t* p) {
  Mra m;
  m.local_comm_id = static_cast<uint32_t>(mra::kLocalCommId.get(p));
  m.remote_comm_id = static_cast<uint32_t>(mra::kRemoteCommId.get(p));
  m.message_mraed = static_cast<MsgRef>(mra::kMessageMraed.get(p));
  m.service_timeout = static_cast<uint8_t>(mra::kServiceTimeout.get(p));
  m.private_data = get_bytes(p, mra::kPrivateData);
  return m;
}

bool encode(const Rej& m, uint64_t tid, Mad& out) {
  if (!fits(m.private_data, rej::kPrivateData) || !fits(m.ari, rej::kAri)) return false;
  uint8_t* p = begin(out, AttrId::kRej, tid);
  rej::kLocalCommId.set(p, m.local_comm_id);
  rej::kRemoteCommId.set(p, m.remote_comm_id);
  rej::kMessageRejected.set(p, static_cast<uint8_t>(m.message_rejected));
  rej::kRejectInfoLength.set(p, m.ari.size());
  rej::kReason.set(p, m.reason);
  put_bytes(p, rej::kAri, m.ari);
  put_bytes(p, rej::kPrivateData, m.private_data);
  return true;
}

Rej decode_rej(const uint8_t* p) {
  Rej m;
  m.local_comm_id = static_cast<uint32_t>(rej::kLocalCommId.get(p));
  m.remote_comm_id = static_cast<uint32_t>(rej::kRemoteCommId.get(p));
  m.message_rejected = static_cast<MsgRef>(rej::kMessageRejected.get(p));
  m.reason = static_cast<uint16_t>(rej::kReason.get(p));
  size_t ari_len = std::min<size_t>(rej::kRejectInfoLength.get(p), rej::kAri.len);
  m.ari.assign(p + rej::kAri.byte, p + rej::kAri.byte + ari_len);
  m.private_data = get_bytes(p, rej::kPrivateData);
  return m;
}

bool encode(const Rep& m, uint64_t tid, Mad& out) {
  if (!fits(m.private_data, rep::kPrivateData)) return false;
  uint8_t* p = begin(out, AttrId::kRep, tid);
  using namespace rep;
  kLocalCommId.set(p, m.local_comm_id);
  kRemoteCommId.set(p, m.remote_comm_id);
  kLocalQkey.set(p, m.local_qkey);
  kLocalQpn.set(p, m.local_qpn);
  kStartingPsn.set(p, m.starting_psn);
  kResponderResources.set(p, m.responder_resources);
  kInitiatorDepth.set(p, m.initiator_depth);
  kTargetAckDelay.set(p, m.target_ack_delay);
  kFailoverAccepted.set(p, m.failover_accepted);
  kEndToEndFlowControl.set(p, m.end_to_end_flow_control);
  kRnrRetryCount.set(p, m.rnr_retry_count);
  kSrq.set(p, m.srq);
  kLocalCaGuid.set(p, m.local_ca_guid);
  put_bytes(p, kPrivateData, m.private_data);
  return true;
}

Rep decode_rep(const uint8_t* p) {
  using namespace rep;
  Rep m;
  m.local_comm_id = static_cast<uint32_t>(kLocalCommId.get(p));
  m.remote_comm_id = static_cast<uint32_t>(kRemoteCommId.get(p));
  m.local_qkey = static_cast<uint32_t>(kLocalQkey.get(p));
  m.local_qpn = static_cast<uint32_t>(kLocalQpn.get(p));
  m.starting_psn = static_cast<uint32_t>(kStartingPsn.get(p));
  m.responder_resources = static_cast<uint8_t>(kResponderResources.get(p));
  m.initiator_depth = static_cast<uint8_t>(kInitiatorDepth.get(p));
  m.target_ack_delay = static_cast<uint8_t>(kTargetAckDelay.get(p));
  m.failover_accepted = static_cast<uint8_t>(kFailoverAccepted.get(p));
  m.end_to_end_flow_control = kEndToEndFlowControl.get(p);
  m.rnr_retry_count = static_cast<uint8_t>(kRnrRetryCount.get(p));
  m.srq = kSrq.get(p);
  m.local_ca_guid = kLocalCaGuid.get(p);
  m.private_data = get_bytes(p, kPrivateData);
  return m;
}

bool encode(const Rtu& m, uint64_t tid, Mad& out) {
  if (!fits(m.private_data, rtu::kPrivateData)) return false;
  uint8_t* p = begin(out, AttrId::kRtu, tid);
  rtu::kLocalCommId.set(p, m.local_comm_id);
  rtu::kRemoteCommId.set(p, m.remote_comm_id);
  put_bytes(p, rtu::kPrivateData, m.private_data);
  return true;
}

Rtu decode_rtu(const uint8_t* p) {
  Rtu m;
  m.local_comm_id = static_cast<uint32_t>(rtu::kLocalCommId.get(p));
  m.remote_comm_id = static_cast<uint32_t>(rtu::kRemoteCommId.get(p));
  m.private_data = get_bytes(p, rtu::kPrivateData);
  return m;
}

bool encode(const Dreq& m, uint64_t tid, Mad& out) {
  if (!fits(m.private_data, dreq::kPrivateData)) return false;
  uint8_t* p = begin(out, AttrId::kDreq, tid);
  dreq::kLocalCommId.set(p, m.local_comm_id);
  dreq::kRemoteCommId.set(p, m.remote_comm_id);
  dreq::kRemoteQpn.set(p, m.remote_qpn);
  put_bytes(p, dreq::kPrivateData, m.private_data);
  return true;
}

Dreq decode_dreq(const uint8_t* p) {
  Dreq m;
  m.local_comm_id = static_cast<uint32_t>(dreq::kLocalCommId.get(p));
  m.remote_comm_id = static_cast<uint32_t>(dreq::kRemoteCommId.get(p));
  m.remote_qpn = static_cast<uint32_t>(dreq::kRemoteQpn.get(p));
  m.private_data = get_bytes(p, dreq::kPrivateData);
  return m;
}

bool encode(const Drep& m, uint64_t tid, Mad& out) {
  if (!fits(m.private_data, drep::kPrivateData)) return false;
  uint8_t* p = begin(out, AttrId::kDrep, tid);
  drep::kLocalCommId.set(p, m.local_comm_id);
  drep::kRemoteCommId.set(p, m.remote_comm_id);
  put_bytes(p, drep::kPrivateData, m.private_data);
  return true;
}

Drep decode_drep(const uint8_t* p) {
  Drep m;
  m.local_comm_id = static_cast<uint32_t>(drep::kLocalCommId.get(p));
  m.remote_comm_id = static_cast<uint32_t>(drep::kRemoteCommId.get(p));
  m.private_data = get_bytes(p, drep::kPrivateData);
  return m;
}

bool encode(const SidrReq& m, uint64_t tid, Mad& out) {
  if (!fits(m.private_data, sidr_req::kPrivateData)) return false;
  uint8_t* p = begin(out, AttrId::kSidrReq, tid);
  sidr_req::kRequestId.set(p, m.request_id);
  sidr_req::kPartitionKey.set(p, m.pkey);
  sidr_req::kServiceId.set(p, m.service_id);
  put_bytes(p, sidr_req::kPrivateData, m.private_data);
  return true;
}

SidrReq decode_sidr_req(const uint8_t* p) {
  SidrReq m;
  m.request_id = static_cast<uint32_t>(sidr_req::kRequestId.get(p));
  m.pkey = static_cast<uint16_t>(sidr_req::kPartitionKey.get(p));
  m.service_id = sidr_req::kServiceId.get(p);
  m.private_data = get_bytes(p, sidr_req::kPrivateData);
  return m;
}

bool encode(const SidrRep& m, uint64_t tid, Mad& out) {
  if (!fits(m.private_data, sidr_rep::kPrivateData)) return false;
  uint8_t* p = begin(out, AttrId::kSidrRep, tid);
  sidr_rep::kRequestId.set(p, m.request_id);
  sidr_rep::kStatus.set(p, static_cast<uint8_t>(m.status));
  sidr_rep::kQpn.set(p, m.qpn);
  sidr_rep::kServiceId.set(p, m.service_id);
  sidr_rep::kQkey.set(p, m.qkey);
  put_bytes(p, sidr_rep::kPrivateData, m.private_data);
  return true;
}

SidrRep decode_sidr_rep(const uint8_t* p) {
  SidrRep m;
  m.request_id = static_cast<uint32_t>(sidr_rep::kRequestId.get(p));
  m.status = static_cast<SidrStatus>(sidr_rep::kStatus.get(p));
  m.qpn = static_cast<uint32_t>(sidr_rep::kQpn.get(p));
  m.service_id = sidr_rep::kServiceId.get(p);
  m.qkey = static_cast<uint32_t>(sidr_rep::kQkey.get(p));
  m.private_data = get_bytes(p, sidr_rep::kPrivateData);
  return m;
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
