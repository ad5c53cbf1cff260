// Steering for a shared device (docs/architecture.md, "One device, many processes"): the layout
// that puts a process's slot into its QPNs and CM communication IDs, the classic BPF program that
// sends each datagram arriving at address:4791 to the socket of the process that owns its
// destination (SO_ATTACH_REUSEPORT_CBPF), and the probe datagrams that measure where each
// process's socket sits in the kernel's reuseport group. Pure: bytes and instructions, no socket.
//
// Offsets are from the UDP payload, where the kernel starts a reuseport program (it pulls the
// UDP header first): the BTH (IBTA 9.2: opcode at 0, DestQP in bytes 5..7), then for QP1 a UD
// SEND's DETH (8 bytes) and the MAD (IBTA 13.4.3: attribute ID at MAD byte 16, the CM message at
// MAD byte 24; IBTA 12.6 for where each message keeps its IDs).
#pragma once

#include <linux/filter.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace uroce::share {

// Processes per device address, and where the slot sits in a QPN (24 bits, its top 7) and in a
// local communication ID / SIDR request ID (32 bits, its top 7).
inline constexpr uint32_t kSlotBits = 7;
inline constexpr uint32_t kSlots = 1u << kSlotBits;
inline constexpr uint32_t kQpnSlotShift = 24 - kSlotBits;
inline constexpr uint32_t kQpnsPerSlot = 1u << kQpnSlotShift;
inline constexpr uint32_t kCommIdSlotShift = 32 - kSlotBits;
inline constexpr uint32_t slot_of_qpn(uint32_t qpn) {
  return (qpn >> kQpnSlotShift) & (kSlots - 1);
}
inline constexpr uint32_t slot_of_comm_id(uint32_t id) {
  return id >> kCommIdSlotShift;
}

// The program's view of the group: the position of each slot's socket (-1: none known, or the
// slot is free), and the services listened to, each as the low 32 bits of its IP CM service ID
// (Annex A11: port space << 16 | port; the high 32 bits are zero) with the listener's slot.
struct SteeringTable {
  std::array<int32_t, kSlots> position;
  struct Listener {
    uint32_t service;
    uint32_t slot;
  };
  std::vector<Listener> listeners;
  SteeringTable() { position.fill(-1); }
};

// The program for `t`. Every datagram whose destination has a known position returns it; the
// rest return kNoPosition, past any group, and the kernel then picks a socket by hash.
std::vector<sock_filter> build_program(const SteeringTable& t);
inline constexpr uint32_t kNoPosition = 0xffffffff;

// Where the program sends a datagram, decided the same way in C++ (the relay: a datagram the
// steering brought to the wrong member goes on to its owner). kSlot: the slot of its destination
// QP, or of the CM ID a CM message names; kService: a REQ or SIDR REQ, for the listener of
// `value`'s service (as SteeringTable::Listener::service); kNone: a probe, or too short to tell.
struct Destination {
  enum Kind { kNone, kSlot, kService } kind = kNone;
  uint32_t value = 0;
};
Destination destination_of(const uint8_t* data, size_t len);

// A probe: UDP payload opcode 0xFF (manufacturer-specific, IBTA 9.2.1: no RoCE peer sends it),
// a magic word, the position it asks the program for and the round it belongs to.
inline constexpr size_t kProbeBytes = 20;
inline constexpr uint32_t kProbeMagic = 0x75724f50;  // "urOP"
struct Probe {
  uint32_t position = 0;
  uint32_t round = 0;
};
void write_probe(uint8_t* buf, const Probe& p);
// The probe in a datagram, or nullopt when it is none.
std::optional<Probe> parse_probe(const uint8_t* data, size_t len);

// The payload offsets the program reads (tests build datagrams with them).
namespace offsets {
inline constexpr uint32_t kOpcode = 0;
inline constexpr uint32_t kDestQp = 4;  // 32-bit word: reserved byte, DestQP
inline constexpr uint32_t kDestQpHigh = 5;
inline constexpr uint32_t kMad = 12 + 8;  // BTH + DETH
inline constexpr uint32_t kAttrId = kMad + 16;
inline constexpr uint32_t kCmMessage = kMad + 24;
inline constexpr uint32_t kIdAt0 = kCmMessage;  // REQ's Local Comm ID, SIDR's Request ID
inline constexpr uint32_t kRemoteCommId = kCmMessage + 4;
inline constexpr uint32_t kServiceIdLow = kCmMessage + 12;  // REQ, SIDR REQ: Service ID bits 31..0
inline constexpr uint32_t kProbeMagic = 8;
inline constexpr uint32_t kProbePosition = 12;
inline constexpr uint32_t kProbeRound = 16;
}  // namespace offsets

}  // namespace uroce::share
