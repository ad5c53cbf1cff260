// Fuzzes the DPDK port's frame classifier (dpdk_port/frames.h): classify() on any frame, for a
// port on an IPv4 address with and without multicast groups and on an IPv6 address, then
// parse_arp() on what it calls ARP, parse_nd() on what it calls neighbour discovery and
// make_echo_reply() on what it calls an echo request — the pure code every frame a DPDK port
// receives goes through. Checks besides ASan/UBSan: what classify() points at lies inside the
// frame, and an echo reply classifies again as IP to its sender.
//
// Input: identity:u8 (bit 0: the port joined groups; bit 1: tagged seeds; bit 2: the port's
// address is IPv6), then the frame.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dpdk_port/frames.h"
#include "fuzz_util.h"

namespace {

using namespace uroce::dpdk;
using uroce::fuzz::fail;

const Mac kMe = {0x02, 0, 0, 0, 0, 0x0b};
const Mac kPeer = {0x02, 0, 0, 0, 0, 0x0a};
constexpr uint32_t kMyIp = 0x0a4d0002, kPeerIp = 0x0a4d0001, kGroup = 0xe0000105;
const uint32_t kGroups[] = {kGroup, 0xef010203};
const uroce::wire::IpAddr kMyIp6 = *uroce::wire::IpAddr::parse("fd00::2");
const uroce::wire::IpAddr kPeerIp6 = *uroce::wire::IpAddr::parse("fd00::1");

void inside(const uint8_t* f, size_t len, const uint8_t* p, size_t n, const char* what) {
  if (p < f || p > f + len || n > size_t(f + len - p)) fail(what);
}

uint16_t csum(const uint8_t* p, size_t n) {
  uint32_t s = 0;
  for (size_t i = 0; i + 1 < n; i += 2) s += uint32_t(p[i] << 8 | p[i + 1]);
  if (n & 1) s += uint32_t(p[n - 1] << 8);
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return uint16_t(~s);
}

void write_seeds(const std::string& dir) {
  int n = 0;
  auto save = [&](uint8_t id, const std::vector<uint8_t>& f) {
    std::vector<uint8_t> in{id};
    in.insert(in.end(), f.begin(), f.end());
    uroce::fuzz::write_seed(dir, "seed-" + std::to_string(n++), in);
  };
  for (bool vlan : {false, true}) {
    RoceV2Headers h;
    h.l2 = {kMe, kPeer, uint16_t(vlan ? 42 : 0), 3};
    h.src_ip = uroce::wire::IpAddr(kPeerIp);
    h.dst_ip = uroce::wire::IpAddr(kMyIp);
    h.tos = 26 << 2 | 2;
    h.src_port = 0xc011;
    std::vector<uint8_t> f(roce_v2_header_bytes(vlan) + 64);
    write_roce_v2(f.data(), h, 64);
    save(0, f);
    h.dst_ip = uroce::wire::IpAddr(kGroup);
    h.l2.dst = multicast_mac(kGroup);
    write_roce_v2(f.data(), h, 64);
    save(1, f);
    RoceV1Headers v1;
    v1.l2 = {kMe, kPeer, uint16_t(vlan ? 7 : 0), 5};
    v1.src_ip = kPeerIp;
    v1.dst_ip = kMyIp;
    std::vector<uint8_t> g(roce_v1_header_bytes(vlan) + 64);
    write_roce_v1(g.data(), v1, 64);
    save(0, g);
  }
  uint8_t arp[64];
  Arp req;
  req.op = 1;
  req.sha = kPeer;
  req.spa = kPeerIp;
  req.tpa = kMyIp;
  save(0, std::vector<uint8_t>(arp, arp + write_arp(arp, L2{kBroadcastMac, kPeer, 0, 0}, req)));
  // An ICMP echo request, 32 bytes of data.
  std::vector<uint8_t> e(14 + 20 + 8 + 32);
  std::memcpy(e.data(), kMe.data(), 6);
  std::memcpy(e.data() + 6, kPeer.data(), 6);
  e[12] = 0x08;
  uint8_t* ip = e.data() + 14;
  ip[0] = 0x45;
  ip[3] = 20 + 8 + 32;
  ip[8] = 64;
  ip[9] = 1;  // ICMP
  for (int i = 0; i < 4; ++i) {
    ip[12 + i] = uint8_t(kPeerIp >> (24 - 8 * i));
    ip[16 + i] = uint8_t(kMyIp >> (24 - 8 * i));
  }
  const uint16_t c = csum(ip, 20);
  ip[10] = uint8_t(c >> 8);
  ip[11] = uint8_t(c);
  ip[20] = 8;
  save(0, e);
  // IPv6: RoCEv2, a neighbour solicitation and advertisement, an ICMPv6 echo request.
  {
    RoceV2Headers h;
    h.l2 = {kMe, kPeer, 0, 0};
    h.src_ip = kPeerIp6;
    h.dst_ip = kMyIp6;
    h.src_port = 0xc011;
    h.flow_label = 0xc011;
    std::vector<uint8_t> f(roce_v2_header_bytes(false, true) + 64);
    write_roce_v2(f.data(), h, 64);
    save(4, f);
    uint8_t nd[128];
    save(4, std::vector<uint8_t>(
                nd, nd + write_nd_solicit(nd, L2{kBroadcastMac, kPeer, 0, 0}, kPeerIp6, kMyIp6)));
    save(4, std::vector<uint8_t>(nd,
                                 nd + write_nd_advert(nd, L2{kMe, kPeer, 0, 0}, kPeerIp6, kMyIp6)));
    // The advertisement's bytes with type 128 (its checksum then wrong: the fuzzer finds more).
    std::vector<uint8_t> echo(nd, nd + 14 + 40 + 32);
    echo[14 + 40] = kIcmpv6EchoRequest;
    save(4, echo);
  }
  // PAUSE and PFC.
  std::vector<uint8_t> p(64);
  std::memcpy(p.data(), kPauseMac.data(), 6);
  std::memcpy(p.data() + 6, kPeer.data(), 6);
  p[12] = 0x88;
  p[13] = 0x08;
  p[15] = 0x01;
  p[16] = 0x10;
  save(0, p);
  p[14] = 0x01;
  p[17] = 0x48;
  save(0, p);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const std::string dir = uroce::fuzz::seed_dir(); !dir.empty()) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Identity me{kMe, uroce::wire::IpAddr(kMyIp), {}};
  if (data[0] & 1) me.groups = kGroups;
  if (data[0] & 4) me.ip = kMyIp6;
  const uint8_t* f = data + 1;
  const size_t len = size - 1;
  const Classified c = classify(f, len, me);
  if (c.l2_bytes > len && c.kind != Kind::kTooShort) fail("L2 header beyond the frame");
  switch (c.kind) {
    case Kind::kRoceV2:
      inside(f, len, c.payload, c.payload_len, "RoCEv2 payload outside the frame");
      break;
    case Kind::kRoceV1:
      inside(f, len, c.payload, c.payload_len, "RoCE v1 payload outside the frame");
      inside(f, len, c.grh, kGrhBytes, "GRH outside the frame");
      break;
    case Kind::kArp: {
      Arp a;
      parse_arp(f, len, c, &a);
      break;
    }
    case Kind::kNd: {
      Nd nd;
      if (parse_nd(f, len, c, &nd) && nd.target.bytes()[0] == 0xff) fail("a multicast ND target");
      break;
    }
    case Kind::kIcmpEcho: {
      std::vector<uint8_t> copy(f, f + len);  // exactly the frame: ASan sees any overrun
      make_echo_reply(copy.data(), copy.size(), c, kMe);
      Identity peer{kPeer, c.src_ip, {}};
      const Classified r = classify(copy.data(), copy.size(), peer);
      if (r.kind == Kind::kBadIp || r.kind == Kind::kTooShort)
        fail("an echo reply that its receiver cannot parse");
      break;
    }
    default:
      break;
  }
  return 0;
}
