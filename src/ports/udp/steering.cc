#include "ports/udp/steering.h"

#include <cstring>

namespace uroce::share {
namespace {

// Classic BPF has only forward jumps, with 8-bit conditional offsets: every conditional jump here
// is "if A == k, go to LABEL" written as `jeq #k, 0, 1; ja LABEL` (ja takes a 32-bit offset), so
// the program stays valid however many slots and listeners it tests.
class Assembler {
 public:
  enum Label { kProbe, kProbeOk, kCm, kByRequestId, kService, kSlotMap, kLabels };

  void op(uint16_t code, uint32_t k) { code_.push_back(BPF_STMT(code, k)); }
  void load_byte(uint32_t off) { op(BPF_LD | BPF_B | BPF_ABS, off); }
  void load_half(uint32_t off) { op(BPF_LD | BPF_H | BPF_ABS, off); }
  void load_word(uint32_t off) { op(BPF_LD | BPF_W | BPF_ABS, off); }
  void ret(uint32_t k) { op(BPF_RET | BPF_K, k); }
  // A == k: return `value`; else go on.
  void if_equal_return(uint32_t k, uint32_t value) {
    code_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k, 0, 1));
    ret(value);
  }
  void if_equal_goto(uint32_t k, Label l) {
    code_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k, 0, 1));
    go(l);
  }
  void go(Label l) {
    fixups_.push_back({code_.size(), l});
    code_.push_back(BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0));
  }
  void here(Label l) { at_[l] = code_.size(); }
  std::vector<sock_filter> finish() {
    for (auto [pc, l] : fixups_) code_[pc].k = static_cast<uint32_t>(at_[l] - pc - 1);
    return std::move(code_);
  }

 private:
  std::vector<sock_filter> code_;
  std::vector<std::pair<size_t, Label>> fixups_;
  size_t at_[kLabels] = {};
};

// IBTA table 107: the CM attribute IDs the program tells apart.
constexpr uint32_t kAttrReq = 0x0010;
constexpr uint32_t kAttrSidrReq = 0x0017;
constexpr uint32_t kAttrSidrRep = 0x0018;
constexpr uint32_t kGsiQpn = 1;  // IBTA 3.5.2.4.1

void put_be32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
uint32_t get_be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

}  // namespace

std::vector<sock_filter> build_program(const SteeringTable& t) {
  using A = Assembler;
  A a;
  a.load_byte(offsets::kOpcode);
  a.if_equal_goto(0xff, A::kProbe);
  a.load_word(offsets::kDestQp);
  a.op(BPF_ALU | BPF_AND | BPF_K, 0xffffff);
  a.if_equal_goto(kGsiQpn, A::kCm);
  // Any other QP: the slot in the QPN's top bits.
  a.load_byte(offsets::kDestQpHigh);
  a.op(BPF_ALU | BPF_RSH | BPF_K, kQpnSlotShift - 16);  // QPN bits 23..17
  a.go(A::kSlotMap);

  // QP1: a REQ or SIDR REQ goes to the listener of its service; a SIDR REP carries the
  // requester's ID first; every other CM message names the receiver's ID second.
  a.here(A::kCm);
  a.load_half(offsets::kAttrId);
  a.if_equal_goto(kAttrReq, A::kService);
  a.if_equal_goto(kAttrSidrReq, A::kService);
  a.if_equal_goto(kAttrSidrRep, A::kByRequestId);
  a.load_byte(offsets::kRemoteCommId);
  a.op(BPF_ALU | BPF_RSH | BPF_K, 8 - kSlotBits);
  a.go(A::kSlotMap);
  a.here(A::kByRequestId);
  a.load_byte(offsets::kIdAt0);
  a.op(BPF_ALU | BPF_RSH | BPF_K, 8 - kSlotBits);
  a.go(A::kSlotMap);

  a.here(A::kService);
  a.load_word(offsets::kServiceIdLow);
  for (const auto& l : t.listeners)
    if (l.slot < kSlots && t.position[l.slot] >= 0)
      a.if_equal_return(l.service, static_cast<uint32_t>(t.position[l.slot]));
  a.ret(kNoPosition);

  // A probe asks for the position it names (a position past the group falls back to the hash).
  a.here(A::kProbe);
  a.load_word(offsets::kProbeMagic);
  a.if_equal_goto(kProbeMagic, A::kProbeOk);
  a.ret(kNoPosition);
  a.here(A::kProbeOk);
  a.load_word(offsets::kProbePosition);
  a.op(BPF_RET | BPF_A, 0);

  // A = a slot: its socket's position.
  a.here(A::kSlotMap);
  for (uint32_t s = 0; s < kSlots; ++s)
    if (t.position[s] >= 0) a.if_equal_return(s, static_cast<uint32_t>(t.position[s]));
  a.ret(kNoPosition);
  return a.finish();
}

Destination destination_of(const uint8_t* data, size_t len) {
  // The program's decisions, in its order. A load past a short datagram's end makes the program
  // return 0 (the group's first socket, whoever that is): no destination here.
  if (len < offsets::kDestQp + 4 || data[offsets::kOpcode] == 0xff) return {};
  const uint32_t dest_qp = get_be32(data + offsets::kDestQp) & 0xffffff;
  if (dest_qp != kGsiQpn) return {Destination::kSlot, slot_of_qpn(dest_qp)};
  if (len < offsets::kServiceIdLow + 4) return {};
  const uint32_t attr = uint32_t{data[offsets::kAttrId]} << 8 | data[offsets::kAttrId + 1];
  if (attr == kAttrReq || attr == kAttrSidrReq)
    return {Destination::kService, get_be32(data + offsets::kServiceIdLow)};
  const uint32_t id =
      get_be32(data + (attr == kAttrSidrRep ? offsets::kIdAt0 : offsets::kRemoteCommId));
  return {Destination::kSlot, slot_of_comm_id(id)};
}

void write_probe(uint8_t* buf, const Probe& p) {
  std::memset(buf, 0, kProbeBytes);
  buf[offsets::kOpcode] = 0xff;
  put_be32(buf + offsets::kProbeMagic, kProbeMagic);
  put_be32(buf + offsets::kProbePosition, p.position);
  put_be32(buf + offsets::kProbeRound, p.round);
}

std::optional<Probe> parse_probe(const uint8_t* data, size_t len) {
  if (len != kProbeBytes || data[offsets::kOpcode] != 0xff ||
      get_be32(data + offsets::kProbeMagic) != kProbeMagic)
    return std::nullopt;
  return Probe{get_be32(data + offsets::kProbePosition), get_be32(data + offsets::kProbeRound)};
}

}  // namespace uroce::share
