// The IB Communication Manager's messages (IBTA vol. 1 ch. 12.6) in their 256-byte MADs: the
// common MAD header (13.4.3), and REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR REQ and SIDR REP.
// Pure code: bytes in, structs out, and back. Nothing here knows a socket, a clock or a QP.
//
// Layout: every CM message is the 24-byte MAD header followed by 232 bytes of message. A field
// is named by where it lives in those 232 bytes (its first byte), its width in bits and how far
// its least significant bit sits from the end of the big-endian integer that holds it — the way
// the IBTA tables draw them (fields listed MSB first in 32-bit words). `Field` below reads and
// writes such a field. Each message's field table (mad.cc) is the IBTA table, in order, with its
// byte offsets, each field bound to its member of the decoded struct: the encoder and the decoder
// walk that one list.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace uroce::cm {

inline constexpr size_t kMadBytes = 256;
inline constexpr size_t kMadHeaderBytes = 24;
inline constexpr size_t kCmMessageBytes = kMadBytes - kMadHeaderBytes;  // 232

// MAD common header values for the CM class (IBTA 13.4.3, 12.6.1).
inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kCmMgmtClass = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMadMethodSend = 0x03;  // every CM message is a Send (12.6.1)

// The CM attribute IDs (IBTA table 107).
enum class AttrId : uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001a,
};
const char* attr_name(AttrId id);

// The common MAD header (IBTA 13.4.3), as it is on the wire.
#pragma pack(push, 1)
struct MadHeaderWire {
  uint8_t base_version;
  uint8_t mgmt_class;
  uint8_t class_version;
  uint8_t method;  // R bit (0x80) | method
  uint8_t status[2];
  uint8_t class_specific[2];
  uint8_t tid[8];
  uint8_t attr_id[2];
  uint8_t reserved[2];
  uint8_t attr_mod[4];
};
struct CmMadWire {
  MadHeaderWire hdr;
  uint8_t msg[kCmMessageBytes];
};
#pragma pack(pop)
static_assert(sizeof(MadHeaderWire) == kMadHeaderBytes);
static_assert(sizeof(CmMadWire) == kMadBytes);

// A field of a CM message: `bits` wide (1..32, or a multiple of 8 up to 64), its least
// significant bit `shift` bits above the end of the big-endian integer that starts at `byte` and
// is (bits + shift + 7) / 8 bytes long. E.g. REQ's Retry Count is the low 3 bits of byte 47:
// {47, 3, 0}; its Local CM Response Timeout the high 5 bits of that byte: {47, 5, 3}.
struct Field {
  uint16_t byte;
  uint8_t bits;
  uint8_t shift;
  constexpr size_t len() const { return (bits + shift + 7u) / 8u; }
  uint64_t get(const uint8_t* msg) const;
  void set(uint8_t* msg, uint64_t v) const;  // masks v to the field's width
};

// A byte range of a CM message (GIDs, private data, ARI).
struct Bytes {
  uint16_t byte;
  uint16_t len;
};

// ---- variable parts (offsets within the 232-byte message) --------------------------------
// Each message's private data runs from its first byte to the end of the message; the fixed
// fields' tables are in mad.cc.
constexpr Bytes to_message_end(uint16_t byte) {
  return {byte, static_cast<uint16_t>(kCmMessageBytes - byte)};
}
namespace req {
inline constexpr Bytes kPrivateData = to_message_end(140);  // 92 bytes
}
namespace mra {
inline constexpr Bytes kPrivateData = to_message_end(10);  // 222 bytes
}
namespace rej {
inline constexpr Bytes kAri{12, 72};
inline constexpr Bytes kPrivateData = to_message_end(84);  // 148 bytes
}  // namespace rej
namespace rep {
inline constexpr Bytes kPrivateData = to_message_end(36);  // 196 bytes
}
namespace rtu {
inline constexpr Bytes kPrivateData = to_message_end(8);  // 224 bytes
}
namespace dreq {
inline constexpr Bytes kPrivateData = to_message_end(12);  // 220 bytes
}
namespace drep {
inline constexpr Bytes kPrivateData = to_message_end(8);  // 224 bytes
}
namespace sidr_req {
inline constexpr Bytes kPrivateData = to_message_end(16);  // 216 bytes
}
namespace sidr_rep {
inline constexpr Bytes kPrivateData = to_message_end(96);  // 136 bytes
}

// REJ reasons (IBTA table 112); the ones uroce sends or acts on.
enum class RejReason : uint16_t {
  kNoQp = 1,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupportedReq = 5,
  kInvalidCommId = 6,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConnection = 10,
  kInvalidMtu = 26,
  kConsumerReject = 28,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
};
// What a REJ's reason means to the user of rdma_connect, in words (IBTA 12.6.7, table 112).
const char* rej_reason_text(uint16_t reason);
// REJ's "Message REJected" and MRA's "Message MRAed" (12.6.6, 12.6.7).
enum class MsgRef : uint8_t { kReq = 0, kRep = 1, kOther = 2 };

// SIDR REP status (table 121).
enum class SidrStatus : uint8_t {
  kQpValid = 0,
  kServiceIdNotSupported = 1,
  kRejected = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedVersion = 5,
};

// ---- decoded messages ---------------------------------------------------------------------
using Gid = std::array<uint8_t, 16>;

struct MadHeader {
  uint8_t base_version = kMadBaseVersion;
  uint8_t mgmt_class = kCmMgmtClass;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMadMethodSend;
  uint16_t status = 0;
  uint64_t tid = 0;
  uint16_t attr_id = 0;
  uint32_t attr_mod = 0;
};

// The path of a REQ (its primary path; uroce sends no alternate path).
struct PathInfo {
  uint16_t local_lid = 0xffff, remote_lid = 0xffff;  // RoCE: the permissive LID (Annex A16/A17)
  Gid local_gid{}, remote_gid{};
  uint32_t flow_label = 0;
  uint8_t packet_rate = 0;  // IBTA rate encoding; 0: no limit known
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint8_t sl = 0;
  bool subnet_local = false;      // RoCEv2 routes: not subnet-local
  uint8_t local_ack_timeout = 0;  // 4.096 µs × 2^value
};

struct Req {
  uint32_t local_comm_id = 0;
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t remote_cm_response_timeout = 0;  // how long the passive side may take to answer
  uint8_t transport_service_type = 0;      // 0 RC, 1 UC, 3 XRC (extended)
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;
  uint8_t local_cm_response_timeout = 0;  // how long the active side takes to answer a REP
  uint8_t retry_count = 0;
  uint16_t pkey = 0xffff;
  uint8_t path_mtu = 0;  // ibv_mtu encoding (1 = 256 … 5 = 4096)
  uint8_t rnr_retry_count = 0;
  uint8_t max_cm_retries = 0;
  bool srq = false;
  PathInfo primary;
  std::vector<uint8_t> private_data;  // at most 92 bytes
};

struct Mra {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  MsgRef message_mraed = MsgRef::kReq;
  uint8_t service_timeout = 0;
  std::vector<uint8_t> private_data;
};

struct Rej {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  MsgRef message_rejected = MsgRef::kReq;
  uint16_t reason = 0;
  std::vector<uint8_t> ari;  // at most 72 bytes
  std::vector<uint8_t> private_data;
};

struct Rep {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;
  uint32_t starting_psn = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;
  uint8_t failover_accepted = 0;
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::vector<uint8_t> private_data;
};

struct Rtu {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::vector<uint8_t> private_data;
};

struct Dreq {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint32_t remote_qpn = 0;
  std::vector<uint8_t> private_data;
};

struct Drep {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::vector<uint8_t> private_data;
};

struct SidrReq {
  uint32_t request_id = 0;
  uint16_t pkey = 0xffff;
  uint64_t service_id = 0;
  std::vector<uint8_t> private_data;
};

struct SidrRep {
  uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kQpValid;
  uint32_t qpn = 0;
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::vector<uint8_t> private_data;
};

using Mad = std::array<uint8_t, kMadBytes>;

// Encoding: fills the whole MAD (header with `tid` and the message's attribute ID; reserved bytes
// and unused private data zero). Returns false when a variable part is longer than its field
// (private data, ARI) — nothing is then written.
bool encode(const Req& m, uint64_t tid, Mad& out);
bool encode(const Mra& m, uint64_t tid, Mad& out);
bool encode(const Rej& m, uint64_t tid, Mad& out);
bool encode(const Rep& m, uint64_t tid, Mad& out);
bool encode(const Rtu& m, uint64_t tid, Mad& out);
bool encode(const Dreq& m, uint64_t tid, Mad& out);
bool encode(const Drep& m, uint64_t tid, Mad& out);
bool encode(const SidrReq& m, uint64_t tid, Mad& out);
bool encode(const SidrRep& m, uint64_t tid, Mad& out);

// Decoding. parse_header: false unless the buffer is a whole MAD of the CM class, version 2,
// method Send. The message decoders take the 232 message bytes (after the header) and always
// succeed: every bit pattern is some message; meaning is checked by the state machine. Private
// data is returned at its full field length, as the kernel's CM reports it.
bool parse_header(std::span<const uint8_t> mad, MadHeader* out);
Req decode_req(const uint8_t* msg);
Mra decode_mra(const uint8_t* msg);
Rej decode_rej(const uint8_t* msg);
Rep decode_rep(const uint8_t* msg);
Rtu decode_rtu(const uint8_t* msg);
Dreq decode_dreq(const uint8_t* msg);
Drep decode_drep(const uint8_t* msg);
SidrReq decode_sidr_req(const uint8_t* msg);
SidrRep decode_sidr_rep(const uint8_t* msg);

// CM timeouts are encoded as 4.096 µs × 2^value (IBTA 12.6.5); returns nanoseconds. Values above
// 31 saturate at 31 (2^31 × 4.096 µs ≈ 2.4 hours).
uint64_t cm_timeout_ns(uint8_t value);

}  // namespace uroce::cm
