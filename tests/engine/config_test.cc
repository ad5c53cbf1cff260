#include "engine/config.h"
#include "engine/port_factory.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>

namespace uroce {
namespace {

// Expects parse_devices(spec) to fail with a message naming the variable and `token`.
void expect_devices_error(const std::string& spec, const std::string& token) {
  std::string err;
  auto r = parse_devices(spec, &err);
  EXPECT_FALSE(r.has_value()) << spec;
  EXPECT_NE(err.find("UROCE_DEVICES"), std::string::npos) << err;
  EXPECT_NE(err.find(token), std::string::npos) << "'" << token << "' not in: " << err;
}

void expect_faults_error(const std::string& spec, const std::string& token) {
  std::string err;
  auto r = parse_faults(spec, &err);
  EXPECT_FALSE(r.has_value()) << spec;
  EXPECT_NE(err.find("UROCE_FAULTS"), std::string::npos) << err;
  EXPECT_NE(err.find(token), std::string::npos) << "'" << token << "' not in: " << err;
}

TEST(ConfigTest, ParsesAddressesAndLoopbackNetdev) {
  std::string err;
  auto r = parse_devices("uroce0=127.0.0.2, uroce1 = 10.1.2.3", &err);
  ASSERT_TRUE(r.has_value()) << err;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "uroce0");
  EXPECT_EQ((*r)[0].ipv4, 0x7f000002u);
  EXPECT_EQ((*r)[0].netdev, "lo");  // 127.0.0.2 is local through lo's /8
  EXPECT_EQ((*r)[1].name, "uroce1");
  EXPECT_EQ((*r)[1].ipv4, 0x0a010203u);
}

TEST(ConfigTest, ResolvesNetdevToItsIpv4) {
  std::string err;
  auto r = parse_devices("rxe_lo=lo", &err);
  ASSERT_TRUE(r.has_value()) << err;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].ipv4, 0x7f000001u);
  EXPECT_EQ((*r)[0].netdev, "lo");
}

TEST(ConfigTest, RejectsMalformedDeviceLists) {
  expect_devices_error("", "empty");
  expect_devices_error("   ", "empty");
  expect_devices_error("uroce0", "'uroce0'");
  expect_devices_error("=1.2.3.4", "bad device name ''");
  expect_devices_error("uroce0=", "uroce0");
  expect_devices_error("uroce0=1.2.3", "'1.2.3'");
  expect_devices_error("uroce0=10.0.0.256", "'10.0.0.256'");
  expect_devices_error("uroce0=1.2.3.4.5", "'1.2.3.4.5'");
  expect_devices_error("uroce0=nosuchif9", "nosuchif9");
  expect_devices_error("uroce0=averyveryverylongifname", "averyveryverylongifname");
  expect_devices_error("a=1.2.3.4,a=1.2.3.5", "device 'a' given twice");
  expect_devices_error("a=1.2.3.4,b=1.2.3.4", "1.2.3.4 used by two devices");
  expect_devices_error("a=0.0.0.0", "0.0.0.0");
  expect_devices_error("a=255.255.255.255", "255.255.255.255");
  expect_devices_error("a=224.0.0.1", "224.0.0.1");
  expect_devices_error("a b=1.2.3.4", "'a b'");
  expect_devices_error("a=1.2.3.4,", "empty entry");
  expect_devices_error(",a=1.2.3.4", "empty entry");
  expect_devices_error(std::string(70, 'x') + "=1.2.3.4", std::string(70, 'x'));
  expect_devices_error("a=\xff\x01", "a");
  expect_devices_error(std::string("a=1.2.3.4\0junk", 14), "a");
}

TEST(ConfigTest, ParsesFaults) {
  std::string err;
  auto f = parse_faults("loss=0.05,seed=7", &err);
  ASSERT_TRUE(f.has_value()) << err;
  EXPECT_DOUBLE_EQ(f->rx_loss, 0.05);
  EXPECT_EQ(f->seed, 7u);
  EXPECT_TRUE(f->enabled());

  f = parse_faults("", &err);
  ASSERT_TRUE(f.has_value());
  EXPECT_FALSE(f->enabled());

  f = parse_faults(" seed = 18446744073709551615 , loss = 1e-2 ", &err);
  ASSERT_TRUE(f.has_value()) << err;
  EXPECT_EQ(f->seed, 18446744073709551615ull);
  EXPECT_DOUBLE_EQ(f->rx_loss, 0.01);

  f = parse_faults("loss=1", &err);
  ASSERT_TRUE(f.has_value()) << err;
  EXPECT_DOUBLE_EQ(f->rx_loss, 1.0);
  f = parse_faults("loss=0", &err);
  ASSERT_TRUE(f.has_value()) << err;
  EXPECT_FALSE(f->enabled());
}

TEST(ConfigTest, RejectsBadFaults) {
  expect_faults_error("loss=1.5", "'1.5' is out of range");
  expect_faults_error("loss=-0.1", "'-0.1' is out of range");
  expect_faults_error("loss=abc", "'abc'");
  expect_faults_error("loss=nan", "'nan'");
  expect_faults_error("loss=inf", "'inf'");
  expect_faults_error("loss=0x1p-3", "'0x1p-3'");
  expect_faults_error("loss=0.1.2", "'0.1.2'");
  expect_faults_error("loss=1e999", "'1e999'");
  expect_faults_error("loss=", "loss ''");
  expect_faults_error("seed=-1", "'-1'");
  expect_faults_error("seed=7x", "'7x'");
  expect_faults_error("seed=", "seed ''");
  expect_faults_error("seed=18446744073709551616", "'18446744073709551616' is out of range");
  expect_faults_error("seed=123456789012345678901234", "'123456789012345678901234'");
  expect_faults_error("jitter=5", "unknown key 'jitter'");
  expect_faults_error("delay=5", "needs a unit");
  expect_faults_error("loss", "'loss' is not key=value");
  expect_faults_error("loss=0.1,loss=0.2", "'loss' given twice");
  expect_faults_error("loss=0.1,,seed=1", "empty entry");
  expect_faults_error("\x80\x81=\x82", "unknown key");
}

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ConfigTest, LoadsFromEnvironment) {
  ScopedEnv d("UROCE_DEVICES", "x=127.0.0.3,y=127.0.0.4");
  ScopedEnv f("UROCE_FAULTS", "loss=0.5,seed=3");
  std::string err;
  auto r = load_device_config(&err);
  ASSERT_TRUE(r.has_value()) << err;
  ASSERT_EQ(r->size(), 2u);
  for (const auto& dev : *r) {
    EXPECT_DOUBLE_EQ(dev.faults.rx_loss, 0.5);
    EXPECT_EQ(dev.faults.seed, 3u);
  }
}

TEST(ConfigTest, DefaultWhenUnsetOrEmpty) {
  DeviceConfig expected = default_device_config();
  EXPECT_EQ(expected.name, "uroce0");
  EXPECT_NE(expected.ipv4, 0u);
  for (const char* value : {static_cast<const char*>(nullptr), ""}) {
    ScopedEnv d("UROCE_DEVICES", value);
    ScopedEnv f("UROCE_FAULTS", nullptr);
    std::string err;
    auto r = load_device_config(&err);
    ASSERT_TRUE(r.has_value()) << err;
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].name, "uroce0");
    EXPECT_EQ((*r)[0].ipv4, expected.ipv4);
    EXPECT_FALSE((*r)[0].faults.enabled());
  }
}

TEST(ConfigTest, LoadReportsWhichVariableIsBad) {
  {
    ScopedEnv d("UROCE_DEVICES", "x=1.2.3");
    std::string err;
    EXPECT_FALSE(load_device_config(&err).has_value());
    EXPECT_NE(err.find("UROCE_DEVICES"), std::string::npos) << err;
  }
  {
    ScopedEnv d("UROCE_DEVICES", "x=127.0.0.3");
    ScopedEnv f("UROCE_FAULTS", "loss=2");
    std::string err;
    EXPECT_FALSE(load_device_config(&err).has_value());
    EXPECT_NE(err.find("UROCE_FAULTS"), std::string::npos) << err;
  }
}

TEST(ConfigTest, FormatsIpv4) {
  EXPECT_EQ(format_ipv4(0xc0000202), "192.0.2.2");
}

TEST(ConfigTest, ExpandsCapturePaths) {
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(expand_pcap_path("/tmp/c.pcap", "uroce0", false), "/tmp/c.pcap");
  EXPECT_EQ(expand_pcap_path("/tmp/c.pcap", "uroce1", true), "/tmp/c.uroce1.pcap");
  EXPECT_EQ(expand_pcap_path("/tmp/dir.d/c", "uroce1", true), "/tmp/dir.d/c.uroce1");
  EXPECT_EQ(expand_pcap_path("/tmp/c-%d-%p.pcap", "uroce1", true),
            "/tmp/c-uroce1-" + pid + ".pcap");
  EXPECT_EQ(expand_pcap_path("100%%-%x.pcap", "u", false), "100%-%x.pcap");
}

// A misspelt variable would fall back to the default in silence (issue 36: UROCE_DEVICE for
// UROCE_DEVICES): it is named with the variable meant. A script's own UROCE_ variables, far from
// every known name, and the known ones themselves are not.
TEST(ConfigTest, AMisspeltVariableIsNamedWithTheOneMeant) {
  const char* env[] = {"UROCE_DEVICE=uroce0=127.0.0.1",
                       "UROCE_FAULT=loss=0.1",
                       "UROCE_LOGS=debug",
                       "UROCE_DEVICES=uroce0=127.0.0.1",
                       "UROCE_RUN=/x/uroce-run",
                       "UROCE_CLI=/x/uroce",
                       "UROCE_STRESS=1",
                       "PATH=/bin",
                       "UROCE_=",
                       nullptr};
  const std::vector<std::string> w = misspelt_variables(env);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0],
            "UROCE_DEVICE is not a uroce variable; did you mean UROCE_DEVICES? (it is ignored)");
  EXPECT_NE(w[1].find("UROCE_FAULT is not a uroce variable; did you mean UROCE_FAULTS?"),
            std::string::npos);
  EXPECT_NE(w[2].find("did you mean UROCE_LOG?"), std::string::npos);
  EXPECT_TRUE(misspelt_variables(nullptr).empty());
}

TEST(ConfigTest, StatsAndCaptureComeFromTheEnvironment) {
  setenv("UROCE_DEVICES", "u0=127.0.0.1,u1=127.0.0.2", 1);
  setenv("UROCE_STATS", "1", 1);
  setenv("UROCE_PCAP", "/tmp/x.pcap", 1);
  std::string err;
  auto d = load_device_config(&err);
  ASSERT_TRUE(d.has_value()) << err;
  ASSERT_EQ(d->size(), 2u);
  EXPECT_TRUE((*d)[0].print_stats);
  EXPECT_EQ((*d)[0].pcap_path, "/tmp/x.u0.pcap");
  EXPECT_EQ((*d)[1].pcap_path, "/tmp/x.u1.pcap");
  setenv("UROCE_STATS", "yes", 1);
  EXPECT_FALSE(load_device_config(&err).has_value());
  EXPECT_NE(err.find("UROCE_STATS"), std::string::npos) << err;
  unsetenv("UROCE_DEVICES");
  unsetenv("UROCE_STATS");
  unsetenv("UROCE_PCAP");
}

// UROCE_EARLY_RETRANSMIT turns the RC probe timer off per process (docs/configuration.md).
TEST(ConfigTest, EarlyRetransmitSwitch) {
  ScopedEnv d("UROCE_DEVICES", "u0=127.0.0.1,u1=127.0.0.2");
  std::string err;
  {
    ScopedEnv e("UROCE_EARLY_RETRANSMIT", nullptr);
    auto c = load_device_config(&err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_TRUE((*c)[0].early_retransmit);  // on by default
    EXPECT_TRUE((*c)[1].early_retransmit);
  }
  {
    ScopedEnv e("UROCE_EARLY_RETRANSMIT", "0");
    auto c = load_device_config(&err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_FALSE((*c)[0].early_retransmit);
    EXPECT_FALSE((*c)[1].early_retransmit);
  }
  {
    ScopedEnv e("UROCE_EARLY_RETRANSMIT", "1");
    auto c = load_device_config(&err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_TRUE((*c)[0].early_retransmit);
  }
  {
    ScopedEnv e("UROCE_EARLY_RETRANSMIT", "off");
    EXPECT_FALSE(load_device_config(&err).has_value());
    EXPECT_NE(err.find("UROCE_EARLY_RETRANSMIT"), std::string::npos) << err;
  }
}

// UROCE_PATHS: how many UDP source ports an RC QP sprays over (docs/configuration.md).
TEST(ConfigTest, PathsCount) {
  ScopedEnv d("UROCE_DEVICES", "u0=127.0.0.1,u1=127.0.0.2");
  std::string err;
  {
    ScopedEnv e("UROCE_PATHS", nullptr);
    auto c = load_device_config(&err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ((*c)[0].paths, 1);  // one port per QP unless asked
  }
  {
    ScopedEnv e("UROCE_PATHS", "16");
    auto c = load_device_config(&err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ((*c)[0].paths, 16);
    EXPECT_EQ((*c)[1].paths, 16);
  }
  for (const char* bad : {"0", "65", "4x", "-1"}) {
    ScopedEnv e("UROCE_PATHS", bad);
    EXPECT_FALSE(load_device_config(&err).has_value()) << bad;
    EXPECT_NE(err.find("UROCE_PATHS"), std::string::npos) << err;
  }
}

// UROCE_GSO batches the socket datapath: auto (on loopback interfaces) unless 0 or 1 says
// otherwise (docs/configuration.md says why).
TEST(ConfigTest, GsoSwitch) {
  ScopedEnv d("UROCE_DEVICES", "u0=127.0.0.1");
  std::string err;
  for (const char* v : {static_cast<const char*>(nullptr), "", "auto"}) {
    ScopedEnv e("UROCE_GSO", v);
    auto c = load_device_config(&err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ((*c)[0].gso, DeviceConfig::Gso::kAuto) << (v ? v : "unset");
  }
  {
    ScopedEnv e("UROCE_GSO", "0");
    auto c = load_device_config(&err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ((*c)[0].gso, DeviceConfig::Gso::kOff);
  }
  {
    ScopedEnv e("UROCE_GSO", "1");
    auto c = load_device_config(&err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ((*c)[0].gso, DeviceConfig::Gso::kOn);
  }
  {
    ScopedEnv e("UROCE_GSO", "yes");
    EXPECT_FALSE(load_device_config(&err).has_value());
    EXPECT_NE(err.find("UROCE_GSO"), std::string::npos) << err;
  }
}

// UROCE_ICRC picks the ICRC's CRC routine for the process; a name it does not know is an error
// naming the variable and the value.
TEST(ConfigTest, IcrcRoutine) {
  ScopedEnv d("UROCE_DEVICES", "u0=127.0.0.1,u1=127.0.0.2");
  std::string err;
  for (const char* v : {static_cast<const char*>(nullptr), "", "auto"}) {
    ScopedEnv e("UROCE_ICRC", v);
    auto c = load_device_config(&err);
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ((*c)[0].icrc, wire::IcrcRoutine::kAuto) << (v ? v : "unset");
  }
  for (auto [v, r] :
       {std::pair{"isal", wire::IcrcRoutine::kIsal}, std::pair{"zlib", wire::IcrcRoutine::kZlib},
        std::pair{"pclmul", wire::IcrcRoutine::kPclmul}}) {
    ScopedEnv e("UROCE_ICRC", v);
    auto c = load_device_config(&err);
    if (r == wire::IcrcRoutine::kPclmul && !wire::icrc_routine_available(r)) {
      EXPECT_FALSE(c.has_value());
      EXPECT_NE(err.find("UROCE_ICRC: 'pclmul' is not available here"), std::string::npos) << err;
      continue;
    }
    ASSERT_TRUE(c.has_value()) << err;
    EXPECT_EQ((*c)[0].icrc, r) << v;
    EXPECT_EQ((*c)[1].icrc, r) << v;  // one choice for the process
  }
  {
    ScopedEnv e("UROCE_ICRC", "avx512");
    EXPECT_FALSE(load_device_config(&err).has_value());
    EXPECT_EQ(err, "UROCE_ICRC: 'avx512' is not auto, pclmul, isal or zlib");
  }
}

// auto batches on a loopback interface only; an interface uroce cannot name stays unbatched.
TEST(ConfigTest, GsoAutoBatchesOnLoopbackOnly) {
  DeviceConfig cfg;
  cfg.name = "u0";
  cfg.ipv4 = 0x7f4d0001;  // 127.77.0.1: an address of lo no other test binds
  const auto batching = [&cfg](DeviceConfig::Gso g, const std::string& netdev) {
    cfg.gso = g;
    cfg.netdev = netdev;
    PortCounters counters;
    std::string err;
    auto port = open_port(cfg, counters, &err);
    EXPECT_TRUE(port) << err;
    return port && port->caps().tx_batching;
  };
  EXPECT_TRUE(batching(DeviceConfig::Gso::kAuto, "lo"));
  EXPECT_FALSE(batching(DeviceConfig::Gso::kOff, "lo"));
  EXPECT_FALSE(batching(DeviceConfig::Gso::kAuto, ""));
  EXPECT_TRUE(batching(DeviceConfig::Gso::kOn, ""));
}

TEST(ConfigTest, ParsesDpdkDevicesKeepingTheirDevargsCommas) {
  std::string err;
  auto r = parse_devices(
      "u0=dpdk(dev=net_memif0,role=server,socket=/tmp/m.sock;ip=10.9.0.1/24;gw=10.9.0.254;"
      "mac=02:00:00:00:00:aa;vlan=7;prio=5;dscp=24;mtu=9000;neigh=10.9.0.2@02:00:00:00:00:bb;"
      "roce_v1=1;;eal=--log-level=8 -m 512;neigh=10.9.0.3@02:00:00:00:00:cc;),u1=127.0.0.2",
      &err);
  ASSERT_TRUE(r.has_value()) << err;
  ASSERT_EQ(r->size(), 2u);
  const DeviceConfig& d = (*r)[0];
  EXPECT_EQ(d.port, PortKind::kDpdk);
  EXPECT_EQ(d.dpdk.dev, "net_memif0,role=server,socket=/tmp/m.sock");
  EXPECT_EQ(d.ipv4, 0x0a090001u);
  EXPECT_EQ(d.dpdk.prefix_len, 24u);
  EXPECT_EQ(d.dpdk.gateway, wire::IpAddr(0x0a0900feu));
  EXPECT_TRUE(d.dpdk.has_mac);
  EXPECT_EQ(d.dpdk.mac[5], 0xaa);
  EXPECT_EQ(d.dpdk.vlan, 7);
  EXPECT_EQ(d.dpdk.priority, 5);
  EXPECT_EQ(d.dscp, 24);
  EXPECT_EQ(d.dpdk.mtu, 9000u);
  EXPECT_TRUE(d.dpdk.roce_v1);
  ASSERT_EQ(d.dpdk.neighbours.size(), 2u);  // neigh= is repeatable; empty fields are skipped
  EXPECT_EQ(d.dpdk.neighbours[0].ip, wire::IpAddr(0x0a090002u));
  EXPECT_EQ(d.dpdk.neighbours[1].mac[5], 0xcc);
  EXPECT_EQ(d.dpdk.eal_args, (std::vector<std::string>{"--log-level=8", "-m", "512"}));
  EXPECT_EQ((*r)[1].port, PortKind::kUdp);
  EXPECT_EQ((*r)[1].dscp, 0);
  // Defaults: DSCP 26, priority 3, untagged, every address on-link.
  r = parse_devices("u0=dpdk(dev=net_ring0;ip=10.1.1.1)", &err);
  ASSERT_TRUE(r.has_value()) << err;
  EXPECT_EQ((*r)[0].dscp, 26);
  EXPECT_EQ((*r)[0].dpdk.priority, 3);
  EXPECT_EQ((*r)[0].dpdk.vlan, 0);
  EXPECT_EQ((*r)[0].dpdk.prefix_len, 0u);
}

TEST(ConfigTest, ParsesAnIpv6DpdkDevice) {
  std::string err;
  auto r = parse_devices(
      "u0=dpdk(dev=net_ring0;ip=fd00:9::1/64;gw=fd00:9::fe;neigh=fd00:9::2@02:00:00:00:00:bb)",
      &err);
  ASSERT_TRUE(r.has_value()) << err;
  const DeviceConfig& d = (*r)[0];
  EXPECT_TRUE(d.is_ipv6());
  EXPECT_EQ(d.addr(), *wire::IpAddr::parse("fd00:9::1"));
  EXPECT_EQ(d.dpdk.prefix_len, 64u);
  EXPECT_EQ(d.dpdk.gateway, *wire::IpAddr::parse("fd00:9::fe"));
  ASSERT_EQ(d.dpdk.neighbours.size(), 1u);
  EXPECT_EQ(d.dpdk.neighbours[0].ip, *wire::IpAddr::parse("fd00:9::2"));
}

TEST(ConfigTest, RejectsBadDpdkFieldsNamingThem) {
  expect_devices_error("u0=dpdk(ip=10.1.1.1)", "missing key 'dev'");
  expect_devices_error("u0=dpdk(dev=net_ring0)", "missing key 'ip'");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1", "closing");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.300)",
                       "ip '10.1.1.300' is not an IPv4 or IPv6 address");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1/33)", "prefix");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=fd00::1/129)", "not 1..128");
  // One family per device.
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;gw=fd00::fe)",
                       "key 'gw' is not of the family of ip 10.1.1.1");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=fd00::1/64;neigh=10.1.1.2@02:00:00:00:00:bb)",
                       "key 'neigh' is not of the family of ip fd00::1");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=ff02::1)", "not unicast");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=fd00::1;roce_v1=1)", "needs an IPv4 address");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;vlan=4095)",
                       "vlan '4095' is not a VLAN id 1..4094");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;prio=8)", "prio '8'");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;dscp=64)", "dscp '64'");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;mac=01:00:00:00:00:01)", "multicast");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;mac=02:00:00:00:00)",
                       "mac '02:00:00:00:00' is not a MAC address");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;neigh=10.1.1.2)",
                       "neigh '10.1.1.2' is not ip@");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;mtu=100)", "mtu '100'");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;colour=blue)",
                       "dpdk: unknown key 'colour' (known: dev, ip, gw, mac, vlan, prio, dscp, "
                       "mtu, neigh, eal, roce_v1, share)");
  // A key given twice is refused (neigh= excepted: each adds a neighbour).
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;vlan=3;vlan=4)",
                       "dpdk: key 'vlan' given twice");
  expect_devices_error("u0=dpdk(dev=net_ring0;ip=10.1.1.1;roce_v1=yes)",
                       "roce_v1 'yes' is not 0 or 1");
}

}  // namespace
}  // namespace uroce

namespace uroce {
namespace {

// UROCE_CC: congestion control for every device, or per device (docs/configuration.md).
TEST(ConfigCc, AllDevicesAndPerDevice) {
  auto devs = parse_devices("u0=127.0.0.1,u1=127.0.0.2,u2=127.0.0.3", nullptr);
  ASSERT_TRUE(devs.has_value());
  std::string err;
  ASSERT_TRUE(apply_cc("dcqcn,preset=paper", *devs, &err)) << err;
  for (const DeviceConfig& d : *devs) {
    EXPECT_EQ(d.cc.algorithm, transport::cc::Algorithm::kDcqcn);
    EXPECT_EQ(d.cc.dcqcn.rpg_time_reset, 55u);
  }
  ASSERT_TRUE(apply_cc("dcqcn ; u1: timely ; u2:none,np=1", *devs, &err)) << err;
  EXPECT_EQ((*devs)[0].cc.algorithm, transport::cc::Algorithm::kDcqcn);
  EXPECT_EQ((*devs)[0].cc.dcqcn.rpg_time_reset, 300u);  // cx, the default preset
  EXPECT_EQ((*devs)[1].cc.algorithm, transport::cc::Algorithm::kTimely);
  EXPECT_EQ((*devs)[2].cc.algorithm, transport::cc::Algorithm::kNone);
  EXPECT_TRUE((*devs)[2].cc.np.enabled);
  // Only named devices: the others keep the default (none, the NP on).
  ASSERT_TRUE(apply_cc("u1:dcqcn,rpg_ai_rate=9", *devs, &err)) << err;
  EXPECT_EQ((*devs)[0].cc.algorithm, transport::cc::Algorithm::kNone);
  EXPECT_TRUE((*devs)[0].cc.np.enabled);
  EXPECT_EQ((*devs)[1].cc.dcqcn.rpg_ai_rate, 9u);
}

TEST(ConfigCc, ErrorsNameTheVariableDeviceAndField) {
  auto devs = parse_devices("u0=127.0.0.1,u1=127.0.0.2", nullptr);
  ASSERT_TRUE(devs.has_value());
  const std::pair<const char*, const char*> cases[] = {
      {"dcqcn,rpg_ai_rate=x", "UROCE_CC: rpg_ai_rate 'x' is not an unsigned integer"},
      {"u1:dcqcn,rpg_gd=2", "UROCE_CC: u1: rpg_gd 2 is out of range [10, 20]"},
      {"u9:dcqcn", "UROCE_CC: no device 'u9' (UROCE_DEVICES names them)"},
      {"u1:dcqcn;u1:none", "UROCE_CC: device 'u1' given twice"},
      {"dcqcn;timely", "UROCE_CC: more than one section without a device name"},
      {"dcqcn;", "UROCE_CC: empty section"},
      {"u0:", "UROCE_CC: u0: missing algorithm (none, dcqcn or timely)"},
      {"bbr", "UROCE_CC: unknown algorithm 'bbr' (none, dcqcn or timely)"},
  };
  for (const auto& [spec, want] : cases) {
    std::string err;
    EXPECT_FALSE(apply_cc(spec, *devs, &err)) << spec;
    EXPECT_EQ(err, want) << spec;
  }
}

TEST(ConfigCc, FromTheEnvironment) {
  ScopedEnv d("UROCE_DEVICES", "u0=127.0.0.1");
  std::string err;
  {
    ScopedEnv c("UROCE_CC", nullptr);
    auto cfg = load_device_config(&err);
    ASSERT_TRUE(cfg.has_value()) << err;
    EXPECT_EQ((*cfg)[0].cc.algorithm, transport::cc::Algorithm::kNone);
    // As an RNIC's: no rate control, but CE marks answered (default_cc()).
    EXPECT_TRUE((*cfg)[0].cc.np.enabled);
  }
  {
    ScopedEnv c("UROCE_CC", "none");
    auto cfg = load_device_config(&err);
    ASSERT_TRUE(cfg.has_value()) << err;
    EXPECT_EQ((*cfg)[0].cc.algorithm, transport::cc::Algorithm::kNone);
    EXPECT_FALSE((*cfg)[0].cc.np.enabled);  // spelled out: nothing at all
  }
  {
    ScopedEnv c("UROCE_CC", "dcqcn,min_time_between_cnps=50");
    auto cfg = load_device_config(&err);
    ASSERT_TRUE(cfg.has_value()) << err;
    EXPECT_EQ((*cfg)[0].cc.algorithm, transport::cc::Algorithm::kDcqcn);
    EXPECT_EQ((*cfg)[0].cc.np.min_time_between_cnps, 50u);
  }
  {
    ScopedEnv c("UROCE_CC", "dcqcn,rpg_bogus=1");
    EXPECT_FALSE(load_device_config(&err).has_value());
    EXPECT_EQ(err.rfind("UROCE_CC: unknown key 'rpg_bogus' (known: preset, rpg_time_reset, ", 0),
              0u)
        << err;
  }
}

}  // namespace
}  // namespace uroce
