// The shared device's steering (src/ports/udp/steering.h): the classic BPF program the kernel runs
// for each datagram, and share::destination_of, the same decision in C++ that the relay uses to
// pass on a datagram the program sent astray. A small interpreter of the instructions the program
// uses runs it here, so that the two are checked against each other datagram by datagram.
#include "ports/udp/steering.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace uroce::share {
namespace {

// Runs a classic BPF program over `pkt` as the kernel runs a reuseport program over a UDP
// payload: absolute loads of bytes, halves and words (big-endian), AND/RSH on A, JEQ/JA, RET. A
// load past the end returns 0 from the program, as the kernel's does; anything else is a failure.
uint32_t run(const std::vector<sock_filter>& prog, const std::vector<uint8_t>& pkt) {
  uint32_t a = 0;
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const sock_filter& i = prog[pc];
    switch (i.code) {
      case BPF_LD | BPF_B | BPF_ABS:
      case BPF_LD | BPF_H | BPF_ABS:
      case BPF_LD | BPF_W | BPF_ABS: {
        const size_t n = BPF_SIZE(i.code) == BPF_B ? 1 : BPF_SIZE(i.code) == BPF_H ? 2 : 4;
        if (i.k + n > pkt.size()) return 0;
        a = 0;
        for (size_t b = 0; b < n; ++b) a = a << 8 | pkt[i.k + b];
        break;
      }
      case BPF_ALU | BPF_AND | BPF_K:
        a &= i.k;
        break;
      case BPF_ALU | BPF_RSH | BPF_K:
        a >>= i.k;
        break;
      case BPF_JMP | BPF_JA:
        pc += i.k;
        break;
      case BPF_JMP | BPF_JEQ | BPF_K:
        pc += a == i.k ? i.jt : i.jf;
        break;
      case BPF_RET | BPF_K:
        return i.k;
      case BPF_RET | BPF_A:
        return a;
      default:
        ADD_FAILURE() << "instruction " << pc << " has code " << i.code;
        return 0;
    }
  }
  ADD_FAILURE() << "the program ran off its end";
  return 0;
}

void put32(std::vector<uint8_t>& p, size_t at, uint32_t v) {
  for (size_t b = 0; b < 4; ++b) p[at + b] = static_cast<uint8_t>(v >> (24 - 8 * b));
}

// What the program returns for a datagram whose destination_of is `d`, given table `t`.
uint32_t expected_position(const SteeringTable& t, const Destination& d) {
  uint32_t slot = kSlots;
  if (d.kind == Destination::kSlot) slot = d.value;
  if (d.kind == Destination::kService)
    for (const auto& l : t.listeners)
      if (l.service == d.value) {
        slot = l.slot;
        break;
      }
  return slot < kSlots && t.position[slot] >= 0 ? static_cast<uint32_t>(t.position[slot])
                                                : kNoPosition;
}

TEST(SteeringTest, TheRelayDecidesAsTheProgramDoes) {
  std::mt19937 rng(7);
  SteeringTable t;
  // Some slots in the group, in an order of their own, and some listeners, one of them of a slot
  // without a position (its process is being measured).
  for (uint32_t s = 0; s < kSlots; s += 3) t.position[s] = static_cast<int32_t>((s * 5) % 61);
  t.listeners = {{0x0106'4e20, 3}, {0x0111'0010, 9}, {0x0106'1389, 4}};
  const auto prog = build_program(t);
  const uint16_t attrs[] = {0x0010, 0x0011, 0x0012, 0x0013, 0x0014, 0x0015,
                            0x0016, 0x0017, 0x0018, 0x0019, 0x0020};
  int cm = 0, qp = 0;
  for (int n = 0; n < 20000; ++n) {
    std::vector<uint8_t> pkt(offsets::kServiceIdLow + 4 + rng() % 64);
    for (auto& b : pkt) b = static_cast<uint8_t>(rng());
    pkt[offsets::kOpcode] = static_cast<uint8_t>(rng() % 0xff);  // never a probe's 0xFF
    if (rng() % 2) {
      // A CM message on QP1: an attribute the program tells apart or not, IDs in any slot, a
      // service some slot listens to or none.
      put32(pkt, offsets::kDestQp, (rng() & 0xff000000u) | 1);
      const uint16_t attr = attrs[rng() % std::size(attrs)];
      pkt[offsets::kAttrId] = static_cast<uint8_t>(attr >> 8);
      pkt[offsets::kAttrId + 1] = static_cast<uint8_t>(attr);
      if (rng() % 2) put32(pkt, offsets::kServiceIdLow, t.listeners[rng() % 3].service);
      ++cm;
    } else {
      ++qp;
    }
    const Destination d = destination_of(pkt.data(), pkt.size());
    ASSERT_NE(d.kind, Destination::kNone);
    ASSERT_EQ(run(prog, pkt), expected_position(t, d)) << "datagram " << n;
  }
  EXPECT_GT(cm, 1000);
  EXPECT_GT(qp, 1000);
}

TEST(SteeringTest, ProbesAndShortDatagramsHaveNoDestination) {
  std::vector<uint8_t> probe(kProbeBytes);
  write_probe(probe.data(), {3, 9});
  EXPECT_EQ(destination_of(probe.data(), probe.size()).kind, Destination::kNone);
  std::vector<uint8_t> shorter(7, 0x11);
  EXPECT_EQ(destination_of(shorter.data(), shorter.size()).kind, Destination::kNone);
  // A QP1 datagram too short to hold the CM message's IDs: the program's load fails and it
  // returns position 0, whoever sits there; the relay does not guess.
  std::vector<uint8_t> gsi(offsets::kServiceIdLow, 0);
  put32(gsi, offsets::kDestQp, 1);
  EXPECT_EQ(destination_of(gsi.data(), gsi.size()).kind, Destination::kNone);
  // Any other QP: its slot, from the QPN's top bits.
  std::vector<uint8_t> data(12, 0);
  put32(data, offsets::kDestQp, 5u << kQpnSlotShift | 0x11);
  const Destination d = destination_of(data.data(), data.size());
  EXPECT_EQ(d.kind, Destination::kSlot);
  EXPECT_EQ(d.value, 5u);
}

}  // namespace
}  // namespace uroce::share
