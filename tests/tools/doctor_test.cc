// `uroce doctor`'s pure parts (src/tools/doctor): the rules that turn published counters into
// sentences, the verdicts of the path probes, the SIDR probe's bytes, and the rendering (text
// and JSON). The probes themselves, against real peers with one thing broken each, are in
// tests/integration/doctor.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cm/mad.h"
#include "tools/doctor/counter_rules.h"
#include "tools/doctor/device_checks.h"
#include "tools/doctor/doctor.h"
#include "tools/doctor/nic_checks.h"
#include "tools/doctor/path_checks.h"
#include "tools/doctor/report.h"
#include "tools/doctor/roce_probe.h"
#include "transport/wire/icrc.h"
#include "transport/wire/ip.h"
#include "transport/wire/wire.h"

namespace uroce::doctor {
namespace {

Check find(const std::vector<Check>& checks, const std::string& id) {
  auto it = std::find_if(checks.begin(), checks.end(), [&](const Check& c) { return c.id == id; });
  if (it == checks.end()) throw std::runtime_error("no check " + id);
  return *it;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const wire::IpAddr kPeer4(0x0a000002u);  // 10.0.0.2
const wire::IpAddr kPeer6 = *wire::IpAddr::parse("fd00::2");

// ---- counters ------------------------------------------------------------------------------

TEST(DoctorCounters, QuietDevicePassesEveryCheckNamingTheCountersItRead) {
  DeviceCounterView v;
  v.device = "uroce0";
  v.ip = wire::IpAddr(0x0a000001);
  v.counters = {{"qp_sent_pkts", 1000}, {"sent_pkts", 1000}};
  const auto checks = diagnose_counters(v);
  for (const Check& c : checks) EXPECT_EQ(c.status, Status::kPass) << c.id << ": " << c.evidence;
  EXPECT_TRUE(contains(find(checks, "counters.loss").evidence, "retransmitted_pkts 0"));
  EXPECT_TRUE(contains(find(checks, "counters.rnr").evidence, "send_rnr_err 0"));
  EXPECT_EQ(find(checks, "counters.drops").status, Status::kPass);
}

TEST(DoctorCounters, RetransmissionsAreLossBetweenTheDevicesWithTheWorstPeer) {
  DeviceCounterView v;
  v.device = "uroce0";
  v.ip = wire::IpAddr(0x0a000001);
  v.counters = {{"qp_sent_pkts", 1000}, {"retransmitted_pkts", 50}, {"rcvd_seq_err", 7}};
  v.peers[wire::IpAddr(0x0a000002u)] = {.retransmitted_pkts = 45};
  v.peers[*wire::IpAddr::parse("fd00::3")] = {.retransmitted_pkts = 5};
  const Check c = find(diagnose_counters(v), "counters.loss");
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_TRUE(contains(c.evidence, "packets are lost between the two devices"));
  EXPECT_TRUE(contains(c.evidence, "retransmitted_pkts 50 of qp_sent_pkts 1000 (5%)"));
  EXPECT_TRUE(contains(c.evidence, "rcvd_seq_err 7"));
  EXPECT_TRUE(contains(c.evidence, "towards 10.0.0.2 (45), fd00::3 (5)"));
  EXPECT_FALSE(c.fix.empty());
}

TEST(DoctorCounters, ALittleLossWarnsAndInjectedLossIsSaidToBeInjected) {
  DeviceCounterView v;
  v.counters = {{"qp_sent_pkts", 100000}, {"retransmitted_pkts", 3}};
  EXPECT_EQ(find(diagnose_counters(v), "counters.loss").status, Status::kWarn);
  v.counters["retransmitted_pkts"] = 500;
  v.counters["fault_drops"] = 480;
  const Check c = find(diagnose_counters(v), "counters.loss");
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_TRUE(contains(c.evidence, "UROCE_FAULTS dropped 480 packets on purpose"));
  EXPECT_TRUE(contains(c.fix, "unset UROCE_FAULTS"));
}

TEST(DoctorCounters, RnrIsTheReceiverNotPostingFastEnough) {
  DeviceCounterView v;
  v.counters = {{"send_rnr_err", 12}};
  const Check c = find(diagnose_counters(v), "counters.rnr");
  EXPECT_EQ(c.status, Status::kWarn);
  EXPECT_TRUE(contains(c.evidence, "the receiver does not post receives fast enough"));
  EXPECT_TRUE(contains(c.evidence, "send_rnr_err 12"));
  v.counters["retry_rnr_exceeded_err"] = 1;
  EXPECT_EQ(find(diagnose_counters(v), "counters.rnr").status, Status::kFail);
}

TEST(DoctorCounters, IcrcErrorsRetryExceededAndUnansweredMarks) {
  DeviceCounterView v;
  v.counters = {{"rcvd_icrc_err", 4},
                {"retry_exceeded_err", 2},
                {"rx_icmp_unreachable", 1},
                {"rcvd_ecn_ce", 90}};
  const auto checks = diagnose_counters(v);
  EXPECT_EQ(find(checks, "counters.icrc").status, Status::kFail);
  EXPECT_TRUE(contains(find(checks, "counters.icrc").evidence, "rcvd_icrc_err 4"));
  const Check r = find(checks, "counters.retry_exceeded");
  EXPECT_EQ(r.status, Status::kFail);
  EXPECT_TRUE(contains(r.evidence, "rx_icmp_unreachable 1"));
  const Check e = find(checks, "counters.ecn");
  EXPECT_EQ(e.status, Status::kWarn);
  EXPECT_TRUE(contains(e.evidence, "answers none with a CNP"));
  EXPECT_TRUE(contains(e.fix, "UROCE_CC=dcqcn"));
  // Answered marks are congestion handled as designed.
  v.counters = {{"rcvd_ecn_ce", 90}, {"np_cnp_sent", 30}};
  EXPECT_EQ(find(diagnose_counters(v), "counters.ecn").status, Status::kPass);
}

TEST(DoctorCounters, EachDropCauseIsItsOwnSentenceAndADownPortFails) {
  DeviceCounterView v;
  v.port_active = false;
  v.counters = {{"rx_unknown_qp", 3},
                {"odp_faults", 2},
                {"rx_socket_overflow", 9},
                {"rx_prio3_pause", 5},
                {"rx_pause_frames", 5}};
  const auto checks = diagnose_counters(v);
  EXPECT_EQ(find(checks, "counters.port").status, Status::kFail);
  EXPECT_TRUE(contains(find(checks, "counters.drops.rx_unknown_qp").evidence,
                       "QPs that do not exist on this device"));
  EXPECT_TRUE(contains(find(checks, "counters.drops.rx_unknown_qp").evidence, "(rx_unknown_qp 3)"));
  EXPECT_EQ(find(checks, "counters.drops.odp_faults").status, Status::kWarn);
  EXPECT_TRUE(contains(find(checks, "counters.drops.odp_faults").evidence, "on-demand (ODP)"));
  EXPECT_EQ(find(checks, "counters.drops.rx_socket_overflow").status, Status::kFail);
  EXPECT_TRUE(contains(find(checks, "counters.pfc").evidence, "rx_prio3_pause 5"));
  EXPECT_THROW(find(checks, "counters.drops"), std::runtime_error);  // no "no drops" line
}

// ---- path verdicts -------------------------------------------------------------------------

TEST(DoctorPath, MtuLadderThatStopsBelowTheDevicesMtuFails) {
  std::vector<MtuStep> steps = {
      {256, 320, true, {}}, {512, 576, true, {}}, {1024, 1088, true, {}}, {2048, 2112, false, {}}};
  const Check c = mtu_verdict(steps, 4096, 9000);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_TRUE(contains(c.evidence, "the largest RoCE packet that fits is of MTU 1024"));
  EXPECT_TRUE(contains(c.evidence, "2112-byte echo requests with DF get no answer"));
  EXPECT_TRUE(contains(c.evidence, "active MTU 4096 (interface MTU 9000)"));
  EXPECT_TRUE(contains(c.evidence, "black hole"));
  EXPECT_TRUE(contains(c.fix, "-m 1024"));
  // A router that says so is named.
  IcmpError e{.type = 3, .code = 4, .info = 1500, .offender = wire::IpAddr(0x0a000101u)};
  steps.back().error = e;
  EXPECT_TRUE(contains(mtu_verdict(steps, 4096, 9000).evidence,
                       "fragmentation needed (next hop MTU 1500) from 10.0.1.1"));
  // The same path is fine for a device that never sends more than 1024.
  EXPECT_EQ(mtu_verdict(steps, 1024, 1500).status, Status::kWarn);
  steps.pop_back();
  steps.push_back({2048, 2112, true, {}});
  steps.push_back({4096, 4160, true, {}});
  EXPECT_EQ(mtu_verdict(steps, 4096, 9000).status, Status::kPass);
}

TEST(DoctorPath, TosVerdicts) {
  const uint8_t sent = 26 << 2 | 2;  // DSCP 26, ECT(0)
  EXPECT_EQ(dscp_verdict(sent, sent).status, Status::kPass);
  EXPECT_EQ(ecn_verdict(sent, sent).status, Status::kPass);
  const Check d = dscp_verdict(sent, 0 << 2 | 2);
  EXPECT_EQ(d.status, Status::kFail);
  EXPECT_TRUE(contains(d.evidence, "sent with DSCP 26 came back with DSCP 0"));
  const Check e = ecn_verdict(sent, 26 << 2);
  EXPECT_EQ(e.status, Status::kFail);
  EXPECT_TRUE(contains(e.evidence, "sent ECT(0) came back Not-ECT"));
  EXPECT_TRUE(contains(e.evidence, "the path clears ECN"));
  EXPECT_EQ(ecn_verdict(sent, 26 << 2 | 3).status, Status::kPass);  // CE: marking works
}

TEST(DoctorPath, Udp4791OutcomesSayWhatIsConclusive) {
  using O = RoceProbeResult::Outcome;
  RoceProbeResult r;
  r.outcome = O::kAnswered;
  r.sidr_status = 1;
  r.rtt_us = 80;
  r.reply_tos = 2;
  Check c = udp_verdict(kPeer4, r);
  EXPECT_EQ(c.status, Status::kPass);
  EXPECT_TRUE(contains(c.evidence, "SIDR REP: service ID not supported"));
  EXPECT_TRUE(contains(c.evidence, "DSCP 0, ECT(0)"));
  r.outcome = O::kPortUnreachable;
  r.detail = "port unreachable from 10.0.0.2";
  c = udp_verdict(kPeer4, r);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_TRUE(contains(c.evidence, "nothing listens on 10.0.0.2:4791"));
  r.outcome = O::kSilence;
  r.attempts = 3;
  c = udp_verdict(kPeer4, r);
  EXPECT_EQ(c.status, Status::kWarn);
  EXPECT_TRUE(contains(c.evidence, "inconclusive"));
  EXPECT_TRUE(contains(c.evidence, "a filter drops UDP 4791"));
  r.outcome = O::kCannotRun;
  r.detail = "why";
  EXPECT_EQ(udp_verdict(kPeer4, r).status, Status::kSkip);
}

TEST(DoctorPath, UnreachablePeerFailsUnlessRoceAnswered) {
  EchoSummary e;
  e.sent = 5;
  EXPECT_EQ(reach_verdict(kPeer4, e, nullptr).status, Status::kFail);
  RoceProbeResult r;
  r.outcome = RoceProbeResult::Outcome::kAnswered;
  EXPECT_EQ(reach_verdict(kPeer4, e, &r).status, Status::kWarn);
  e.answered = 5;
  e.min_rtt_us = 40;
  e.avg_rtt_us = 55;
  const Check c = reach_verdict(kPeer4, e, &r);
  EXPECT_EQ(c.status, Status::kPass);
  EXPECT_TRUE(contains(c.evidence, "round trip 40 µs min, 55 µs average"));
}

// ---- the path over IPv6 ----------------------------------------------------------------------

TEST(DoctorPathIpv6, VerdictsNameIcmpv6AndBracketThePort) {
  EchoSummary e;
  e.sent = 5;
  Check c = reach_verdict(kPeer6, e, nullptr);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_TRUE(contains(c.evidence, "fd00::2 does not answer ICMPv6 echo (0/5)")) << c.evidence;
  EXPECT_TRUE(contains(c.fix, "ip route get fd00::2"));
  e.answered = 5;
  e.min_rtt_us = e.avg_rtt_us = 30;
  EXPECT_TRUE(contains(reach_verdict(kPeer6, e, nullptr).evidence, "answers ICMPv6 echo (5/5)"));
  RoceProbeResult r;
  r.outcome = RoceProbeResult::Outcome::kPortUnreachable;
  r.detail = "port unreachable from fd00::2";
  c = udp_verdict(kPeer6, r);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_TRUE(contains(c.evidence, "nothing listens on [fd00::2]:4791")) << c.evidence;
  r.outcome = RoceProbeResult::Outcome::kSilence;
  r.attempts = 3;
  EXPECT_TRUE(contains(udp_verdict(kPeer6, r).evidence, "3 SIDR REQs to [fd00::2]:4791"));
}

TEST(DoctorPathIpv6, MtuLadderCountsTheLongerHeader) {
  // An IPv6 RoCE packet of MTU m is m + 84 bytes: 2048 needs 2132, which a 1500 hop refuses.
  std::vector<MtuStep> steps = {
      {256, 340, true, {}}, {512, 596, true, {}}, {1024, 1108, true, {}}, {2048, 2132, false, {}}};
  steps.back().error =
      IcmpError{.type = 2, .info = 1500, .offender = *wire::IpAddr::parse("fd00::1"), .v6 = true};
  const Check c = mtu_verdict(steps, 4096, 9000, kRoceIpv6Overhead);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_TRUE(contains(c.evidence,
                       "2132-byte echo requests unfragmented get packet too big "
                       "(next hop MTU 1500) from fd00::1"))
      << c.evidence;
  EXPECT_TRUE(contains(c.fix, "at least 4180")) << c.fix;
  steps.back().answered = true;
  steps.back().error.reset();
  steps.push_back({4096, 4180, true, {}});
  EXPECT_TRUE(contains(mtu_verdict(steps, 4096, 9000, kRoceIpv6Overhead).evidence,
                       "echo requests of 4180 bytes unfragmented come back"));
}

TEST(DoctorPathIpv6, Icmpv6ErrorsReadAsTheirIcmpCounterparts) {
  const wire::IpAddr peer = kPeer6;
  IcmpError e{.type = 1, .code = 4, .offender = peer, .v6 = true};
  EXPECT_TRUE(e.port_unreachable());
  EXPECT_EQ(e.text(), "port unreachable from fd00::2");
  e.code = 1;
  EXPECT_FALSE(e.port_unreachable());
  EXPECT_TRUE(contains(e.text(), "administratively prohibited"));
  e.code = 3;
  EXPECT_EQ(e.text(), "address unreachable from fd00::2");
  // ICMP's port unreachable is 3/3; the same numbers in ICMPv6 are "time exceeded".
  IcmpError v4{.type = 3, .code = 3, .offender = kPeer4};
  EXPECT_TRUE(v4.port_unreachable());
  EXPECT_EQ(v4.text(), "port unreachable from 10.0.0.2");
  v4.v6 = true;
  EXPECT_FALSE(v4.port_unreachable());
  EXPECT_TRUE(contains(v4.text(), "time exceeded"));
}

TEST(DoctorPathIpv6, PeerOfTheOtherFamilyIsAClearFailure) {
  const auto p4 = kPeer4;
  EXPECT_FALSE(family_mismatch("uroce0", "fd00::1", true, "fd00::2", kPeer6));
  EXPECT_FALSE(family_mismatch("uroce0", "10.0.0.1", false, "10.0.0.2", p4));
  auto k = family_mismatch("uroce0", "fd00::1", true, "10.0.0.2", p4);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->id, "path.family");
  EXPECT_EQ(k->status, Status::kFail);
  EXPECT_TRUE(contains(k->evidence, "uroce0 is on IPv6 (fd00::1) and 10.0.0.2 is an IPv4 address"))
      << k->evidence;
  EXPECT_TRUE(contains(k->fix, "the peer's IPv6 address (or a name with an AAAA record)"));
  k = family_mismatch("uroce0", "10.0.0.1", false, "peer.example", kPeer6);
  ASSERT_TRUE(k);
  EXPECT_TRUE(contains(k->evidence, "peer.example resolves only to fd00::2, an IPv6 address"))
      << k->evidence;
  EXPECT_TRUE(contains(k->fix, "a device on IPv6 (-d)"));
}

TEST(DoctorPathIpv6, NameWithBothFamiliesGivesTheDevicesOwn) {
  const std::vector<wire::IpAddr> both = {kPeer4, kPeer6};
  EXPECT_EQ(choose_peer(both, true), kPeer6);
  EXPECT_EQ(choose_peer(both, false), kPeer4);
  EXPECT_EQ(choose_peer({kPeer4}, true), kPeer4);  // family_mismatch then says why
  EXPECT_EQ(choose_peer({}, false), wire::IpAddr{});
}

// The IPv6 probe's ICRC follows the IPv6 masking rules: the framing overload's value is what
// wire::icrc_ipv6 computes over the whole packet as it would leave (header fields the kernel
// picks — Traffic Class, Flow Label, Hop Limit — set to anything), and it differs from the
// IPv4 rules' value for the same bytes.
TEST(DoctorRoceProbe, SidrReqOverIpv6CarriesTheIpv6Icrc) {
  const wire::IpAddr src = *wire::IpAddr::parse("fd00:7::1"),
                     dst = *wire::IpAddr::parse("fd00:7::2");
  const uint16_t sport = 40001;
  const auto p = build_sidr_probe(src, dst, sport, 0x2345678, 7);
  ASSERT_EQ(p.size(), wire::kBthBytes + wire::kDethBytes + cm::kMadBytes + 4);
  const uint32_t carried = wire::load_le32(p.data() + p.size() - 4);
  wire::Ipv6UdpFraming f{.src = src, .dst = dst, .src_port = sport};
  EXPECT_EQ(wire::icrc(f, {p.data(), p.size() - 4}), carried);
  // The packet on the wire: IPv6 header (version 6, TC 0x68, flow label 0xabcde, hop limit 17),
  // UDP header (checksum anything), the probe without its ICRC.
  const size_t udp_len = 8 + p.size();
  std::vector<uint8_t> ip = {0x66, 0x8a, 0xbc, 0xde, uint8_t(udp_len >> 8), uint8_t(udp_len),
                             17,   17};
  ip.insert(ip.end(), src.bytes().begin(), src.bytes().end());
  ip.insert(ip.end(), dst.bytes().begin(), dst.bytes().end());
  const uint8_t udp[8] = {uint8_t(sport >> 8),   uint8_t(sport),   0x12, 0xb7,
                          uint8_t(udp_len >> 8), uint8_t(udp_len), 0x5a, 0xa5};
  ip.insert(ip.end(), udp, udp + 8);
  ip.insert(ip.end(), p.begin(), p.end() - 4);
  EXPECT_EQ(wire::icrc_ipv6(ip), carried);
  ip[1] ^= 0xff;  // Traffic Class and Flow Label are masked
  ip[7] = 1;      // so is the Hop Limit
  EXPECT_EQ(wire::icrc_ipv6(ip), carried);
  ip[8 + 15] ^= 1;  // the source address is covered
  EXPECT_NE(wire::icrc_ipv6(ip), carried);
  // The same request between IPv4 addresses gets the IPv4 rules' ICRC, not this one.
  const auto p4 =
      build_sidr_probe(wire::IpAddr(0x0a000001u), wire::IpAddr(0x0a000002u), sport, 0x2345678, 7);
  EXPECT_TRUE(std::equal(p.begin(), p.end() - 4, p4.begin()));
  EXPECT_NE(wire::load_le32(p4.data() + p4.size() - 4), carried);
}

TEST(DoctorDevice, InterfaceMtuBelowRoce4096Warns) {
  EXPECT_EQ(mtu_verdict_device("eth0", 9000).status, Status::kPass);
  const Check c = mtu_verdict_device("eth0", 1500);
  EXPECT_EQ(c.status, Status::kWarn);
  EXPECT_TRUE(contains(c.evidence, "active MTU 1024"));
  EXPECT_TRUE(contains(c.evidence, "at least 4160"));
  EXPECT_EQ(mtu_verdict_device("eth0", 0).status, Status::kSkip);
  // An IPv6 device needs 20 bytes more: MTU 4160 is enough for 4096 over IPv4, not over IPv6.
  EXPECT_EQ(mtu_verdict_device("eth0", 4160).status, Status::kPass);
  const Check v6 = mtu_verdict_device("eth0", 4160, {}, /*ipv6=*/true);
  EXPECT_EQ(v6.status, Status::kWarn);
  EXPECT_TRUE(contains(v6.evidence, "active MTU 2048 (RoCE packets of up to 2132 bytes over IPv6)"))
      << v6.evidence;
  EXPECT_TRUE(contains(v6.evidence, "at least 4180"));
}

TEST(DoctorDevice, AnIpv6DeviceIsCheckedOnItsOwnAddressAndGid) {
  // check_config reads UROCE_DEVICES from the environment (envp is for the misspelt names).
  const char* old = std::getenv("UROCE_DEVICES");
  const std::string saved = old ? old : "";
  setenv("UROCE_DEVICES", "u6=::1", 1);
  const char* env[] = {"UROCE_DEVICES=u6=::1", nullptr};
  std::vector<Check> cfg_checks;
  const auto cfgs = check_config(env, cfg_checks);
  if (old) {
    setenv("UROCE_DEVICES", saved.c_str(), 1);
  } else {
    unsetenv("UROCE_DEVICES");
  }
  ASSERT_TRUE(cfgs.has_value());
  EXPECT_TRUE(contains(cfg_checks.back().evidence, "u6 ::1"));
  const std::vector<Check> checks = check_device(cfgs->at(0), {});
  EXPECT_TRUE(contains(find(checks, "device.address").evidence, "::1 is on lo"));
  EXPECT_TRUE(contains(find(checks, "device.gid").evidence, "index 0: ::1 (RoCE v2, the IPv6"));
  // The bind probe ran on the IPv6 address (free, or held by a uroce process running now).
  const Check& port = find(checks, "device.udp4791");
  EXPECT_TRUE(contains(port.evidence, "[::1]:4791")) << port.evidence;
}

// ---- the SIDR probe ------------------------------------------------------------------------

// ---- the physical link (nic_checks.h) --------------------------------------------------------

TEST(DoctorNic, AHealthyLinkPassesWithItsSpeedAndSetting) {
  NicInfo n;
  n.link_speed_mbps = 25000;
  n.link_full_duplex = 1;
  n.flow_ctrl = NicInfo::kFcFull;
  n.pause_stats = 2;
  n.rx_pause = 7;
  const auto checks = nic_checks(n, "eth0");
  for (const Check& c : checks) EXPECT_EQ(c.status, Status::kPass) << c.id << ": " << c.evidence;
  EXPECT_TRUE(contains(find(checks, "device.speed").evidence, "eth0: 25 Gb/s, full duplex"));
  EXPECT_TRUE(
      contains(find(checks, "device.pause").evidence, "7 PAUSE/PFC frames received, 0 sent"));
}

TEST(DoctorNic, HalfDuplexFailsAndASlowLinkWarns) {
  NicInfo n;
  n.link_speed_mbps = 1000;
  n.link_full_duplex = 0;
  Check k = find(nic_checks(n, "eth0"), "device.speed");
  EXPECT_EQ(k.status, Status::kFail);
  EXPECT_TRUE(contains(k.evidence, "HALF duplex"));
  EXPECT_TRUE(contains(k.fix, "autonegotiation"));
  n.link_full_duplex = 1;
  k = find(nic_checks(n, "eth0"), "device.speed");
  EXPECT_EQ(k.status, Status::kWarn);
  EXPECT_TRUE(contains(k.evidence, "1 Gb/s"));
  n.link_speed_mbps = 0;  // a virtual device's driver
  EXPECT_EQ(find(nic_checks(n, "eth0"), "device.speed").status, Status::kSkip);
}

TEST(DoctorNic, EachErrorCounterIsNamedWithTheFixForItsCause) {
  NicInfo n;
  n.link_speed_mbps = 100000;
  n.link_full_duplex = 1;
  n.rx_errors = 12;
  Check k = find(nic_checks(n, "p"), "device.nic_errors");
  EXPECT_EQ(k.status, Status::kWarn);
  EXPECT_TRUE(contains(k.evidence, "12 frames received in error (rx_errors"));
  EXPECT_TRUE(contains(k.fix, "cable"));
  n.rx_errors = 0;
  n.rx_missed = 3;
  n.rx_nombuf = 4;
  k = find(nic_checks(n, "p"), "device.nic_errors");
  EXPECT_TRUE(contains(k.evidence, "3 frames the NIC dropped for lack of receive descriptors"));
  EXPECT_TRUE(contains(k.evidence, "4 frames dropped for lack of receive buffers (rx_nombuf)"));
  EXPECT_TRUE(contains(k.fix, "did not keep up"));
  n = {};
  n.tx_errors = 1;
  EXPECT_TRUE(contains(find(nic_checks(n, "p"), "device.nic_errors").evidence,
                       "1 frames the NIC failed to send"));
}

TEST(DoctorNic, PauseOffWarnsAndAnUnreportedSettingIsSkipped) {
  NicInfo n;
  n.flow_ctrl = NicInfo::kFcNone;
  Check k = find(nic_checks(n, "p"), "device.pause");
  EXPECT_EQ(k.status, Status::kWarn);
  EXPECT_TRUE(contains(k.evidence, "PAUSE off"));
  EXPECT_TRUE(contains(k.fix, "PFC"));
  n.flow_ctrl = NicInfo::kFcRxPause;
  EXPECT_EQ(find(nic_checks(n, "p"), "device.pause").status, Status::kPass);
  n.flow_ctrl = NicInfo::kFcUnknown;
  k = find(nic_checks(n, "p"), "device.pause");
  EXPECT_EQ(k.status, Status::kSkip);
  EXPECT_TRUE(contains(k.evidence, "does not report"));
}

TEST(DoctorNic, ReadsAPublishedDevicesNicEntriesAndNoneFromAFileWithout) {
  stats_shm::Snapshot s;
  s.counters = {{"sent_pkts", 5},
                {"nic_link_speed_mbps", 10000},
                {"nic_rx_missed", 9},
                {"nic_flow_ctrl", NicInfo::kFcTxPause}};
  auto n = nic_from_snapshot(s);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->link_speed_mbps, 10000u);
  EXPECT_EQ(n->rx_missed, 9u);
  EXPECT_EQ(n->flow_ctrl, uint64_t{NicInfo::kFcTxPause});
  s.counters = {{"sent_pkts", 5}};
  EXPECT_FALSE(nic_from_snapshot(s));
}

TEST(DoctorNic, ReadsAKernelInterfaceFromSysfs) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/uroce-sysfs.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  fs::create_directories(root / "eth9" / "statistics");
  fs::create_directories(root / "veth9" / "statistics");
  auto put = [](const fs::path& p, const std::string& v) { std::ofstream(p) << v << "\n"; };
  put(root / "eth9" / "speed", "40000");
  put(root / "eth9" / "duplex", "full");
  put(root / "eth9" / "statistics" / "rx_errors", "17");
  put(root / "eth9" / "statistics" / "rx_missed_errors", "2");
  put(root / "eth9" / "statistics" / "tx_errors", "0");
  put(root / "veth9" / "speed", "-1");  // what a driver without a speed (or a down link) shows
  NicInfo n = nic_from_netdev("eth9", root, /*ask_driver=*/false);
  EXPECT_EQ(n.link_speed_mbps, 40000u);
  EXPECT_EQ(n.link_full_duplex, 1u);
  EXPECT_EQ(n.rx_errors, 17u);
  EXPECT_EQ(n.rx_missed, 2u);
  EXPECT_EQ(n.flow_ctrl, uint64_t{NicInfo::kFcUnknown});
  n = nic_from_netdev("veth9", root, false);
  EXPECT_EQ(n.link_speed_mbps, 0u);
  EXPECT_EQ(n.rx_errors, 0u);
  fs::remove_all(root);
}

TEST(DoctorRoceProbe, SidrReqIsAValidRoceV2DatagramToQp1) {
  const uint32_t src = 0x0a000001, dst = 0x0a000002;
  const auto p = build_sidr_probe(wire::IpAddr(src), wire::IpAddr(dst), 50000, 0x1234567, 42);
  ASSERT_EQ(p.size(), wire::kBthBytes + wire::kDethBytes + cm::kMadBytes + 4);
  wire::Packet pkt;
  ASSERT_EQ(wire::parse({p.data(), p.size() - 4}, pkt), wire::ParseError::kOk);
  EXPECT_EQ(pkt.bth.opcode, uint8_t(wire::Opcode::kUdSendOnly));
  EXPECT_EQ(pkt.bth.dest_qp, 1u);
  EXPECT_EQ(pkt.deth.qkey, 0x80010000u);
  EXPECT_EQ(pkt.deth.src_qp, 1u);
  wire::Ipv4UdpFraming f{.src_ip = src, .dst_ip = dst, .src_port = 50000};
  EXPECT_EQ(wire::icrc(f, {p.data(), p.size() - 4}), wire::load_le32(p.data() + p.size() - 4));
  cm::MadHeader h;
  ASSERT_TRUE(cm::parse_header(pkt.payload.first(cm::kMadBytes), &h));
  EXPECT_EQ(h.attr_id, uint16_t(cm::AttrId::kSidrReq));
  EXPECT_EQ(h.tid, 42u);
  const cm::SidrReq req = cm::decode_sidr_req(pkt.payload.data() + cm::kMadHeaderBytes);
  EXPECT_EQ(req.request_id, 0x1234567u);
  EXPECT_EQ(req.service_id, kProbeServiceId);
}

TEST(DoctorRoceProbe, RecognisesTheSidrRepToItsRequestOnly) {
  cm::SidrRep rep;
  rep.request_id = 77;
  rep.status = cm::SidrStatus::kServiceIdNotSupported;
  cm::Mad mad;
  ASSERT_TRUE(cm::encode(rep, 9, mad));
  wire::Packet p;
  p.bth.opcode = uint8_t(wire::Opcode::kUdSendOnly);
  p.bth.dest_qp = 1;
  p.deth = {.qkey = 0x80010000, .src_qp = 1};
  std::vector<uint8_t> d(wire::kBthBytes + wire::kDethBytes + mad.size() + 4);
  const size_t hdr = wire::build_headers(p, d.data());
  std::copy(mad.begin(), mad.end(), d.begin() + hdr);
  auto a = parse_sidr_answer(d, 77);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, uint8_t(cm::SidrStatus::kServiceIdNotSupported));
  EXPECT_FALSE(parse_sidr_answer(d, 78));  // another request's answer
  // Our own request is no answer.
  const auto req = build_sidr_probe(wire::IpAddr(1u), wire::IpAddr(2u), 3, 77, 9);
  EXPECT_FALSE(parse_sidr_answer(req, 77));
  EXPECT_FALSE(parse_sidr_answer(std::span<const uint8_t>(d.data(), 10), 77));
}

// ---- rendering -----------------------------------------------------------------------------

TEST(DoctorReport, TextHasMarksEvidenceAndFixesAndTheExitCodeFollowsFailures) {
  Report r;
  r.sections.push_back({"Device uroce0 (10.0.0.1)",
                        {{"device.link", "link", Status::kPass, "eth0 is up", ""},
                         {"device.mtu", "MTU", Status::kWarn, "eth0 MTU 1500", "raise it"}}});
  EXPECT_EQ(exit_code(r), 0);
  std::string t = render_text(r);
  EXPECT_TRUE(contains(t,
                       "Device uroce0 (10.0.0.1)\n  ✓ link: eth0 is up\n  ! MTU: eth0 MTU 1500\n"
                       "      fix: raise it\n"));
  EXPECT_TRUE(contains(t, "Nothing is conclusively wrong"));
  r.sections.push_back(
      {"Path",
       {{"path.udp4791", "UDP 4791", Status::kFail, "nothing \"listens\"", "start it"},
        {"path.ecn", "ECN kept", Status::kSkip, "no ICMP socket", "x"}}});
  EXPECT_EQ(exit_code(r), 1);
  t = render_text(r);
  EXPECT_TRUE(contains(t, "  ✗ UDP 4791: nothing \"listens\"\n      fix: start it\n"));
  EXPECT_TRUE(contains(t, "  – ECN kept: no ICMP socket\n"));
  EXPECT_FALSE(contains(t, "fix: x"));  // a skipped check has nothing to fix
  EXPECT_TRUE(contains(t, "Something is wrong"));
}

TEST(DoctorReport, JsonIsEscapedAndSaysWhetherAllIsWell) {
  Report r;
  r.sections.push_back(
      {"Path", {{"path.udp4791", "UDP 4791", Status::kFail, "nothing \"listens\"", "a\tb"}}});
  EXPECT_EQ(render_json(r),
            "{\"ok\":false,\"sections\":[{\"name\":\"Path\",\"checks\":[{\"id\":\"path.udp4791\","
            "\"title\":\"UDP 4791\",\"status\":\"fail\",\"evidence\":\"nothing \\\"listens\\\"\","
            "\"fix\":\"a\\u0009b\"}]}]}\n");
  r.sections[0].checks[0].status = Status::kWarn;
  EXPECT_EQ(render_json(r).rfind("{\"ok\":true,", 0), 0u);
}

}  // namespace
}  // namespace uroce::doctor
