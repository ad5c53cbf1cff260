// Device and fault-injection configuration, from the environment:
//   UROCE_DEVICES=name=addr|netdev|dpdk(…)[,name=…]   e.g. uroce0=127.0.0.2  or  uroce0=eth0
//     or uroce0=::1  or  uroce0=fd00::1  or  uroce0=fe80::1%eth0 (IPv6: the kernel-UDP port)
//     or uroce0=dpdk(dev=net_memif0,role=server,socket=/tmp/m.sock;ip=10.0.0.1/24)
//   UROCE_FAULTS=loss=0.05,tx.dup=0.01,seed=7   see docs/configuration.md
//   UROCE_CC=dcqcn,preset=cx[;uroce1:timely]    congestion control, per device
// An empty variable counts as unset. Every device gets the same FaultConfig.
#pragma once

#include <cstdint>
#include <string_view>
#include <optional>
#include <string>
#include <vector>

#include "dpdk_port/options.h"
#include "transport/cc/params.h"
#include "transport/spec/spec.h"
#include "transport/wire/icrc.h"

namespace uroce {

// The faults applied to one direction of a port (see engine/faults.h for the pipeline and
// docs/configuration.md for the syntax). Probabilities are per datagram, in [0, 1].
struct FaultSpec {
  double loss = 0.0;           // drop
  double burst = 0.0;          // start a burst: drop this datagram and the next burst_len - 1
  uint32_t burst_len = 4;      // datagrams per burst, >= 1
  double corrupt = 0.0;        // flip corrupt_bits random bits covered by the ICRC
  uint32_t corrupt_bits = 1;   // >= 1
  double dup = 0.0;            // send/deliver a second copy right after
  double reorder = 0.0;        // hold back until 1..reorder_depth later datagrams have passed
  uint32_t reorder_depth = 3;  // >= 1
  uint64_t delay_ns = 0;       // hold every datagram this long...
  uint64_t jitter_ns = 0;      // ...plus uniform [0, jitter_ns); order is kept
  // Receive only (`rx.ce`): set ECN CE on this fraction of datagrams whatever their ECN field —
  // a remarking middlebox, not a conforming switch (RFC 3168 marks only ECT packets). It is how
  // a peer that sends Not-ECT (Linux rxe) can be made to receive CNPs.
  double ce = 0.0;
  // The switch queue (receive only, `rx.queue`): the egress queue of a switch port in front of
  // the device, drained at queue_bps. A datagram that finds queue_buffer bytes (or more than
  // fit) queued is dropped; one that finds between queue_kmin and queue_kmax queued is marked CE
  // (if ECT) with a probability rising linearly to queue_pmax, above queue_kmax always (RED).
  // queue_mark_dequeue: judge the backlog behind a datagram as it leaves rather than ahead of it
  // as it enters — the mark then does not wait out the queue, so the sender hears a queue-delay
  // earlier. Sizes in bytes of Ethernet frames.
  uint64_t queue_bps = 0;  // 0 = no queue
  uint64_t queue_buffer = 1024 * 1024;
  uint64_t queue_kmin = 5 * 1024;    // DCQCN paper: Kmin 5 KB
  uint64_t queue_kmax = 200 * 1024;  // Kmax 200 KB
  double queue_pmax = 0.01;          // Pmax 1 %
  bool queue_mark_dequeue = false;   // mark=enqueue (default) or mark=dequeue
  bool enabled() const {
    return loss > 0.0 || burst > 0.0 || corrupt > 0.0 || dup > 0.0 || reorder > 0.0 ||
           delay_ns > 0 || jitter_ns > 0 || queue_bps > 0 || ce > 0.0;
  }
};

struct FaultConfig {
  // Receive loss (keys `loss` and `rx.loss`). It predates the receive/transmit split and stays a
  // field of its own for compatibility; rx.loss is unused: use rx_spec() for the whole receive
  // side.
  double rx_loss = 0.0;
  uint64_t seed = 1;  // PRNG seed: the same seed makes the same decisions (transmit uses a
                      // stream derived from it, so the receive stream is as before)
  FaultSpec rx;       // receive faults (plain keys and `rx.` keys)
  FaultSpec tx;       // transmit faults (`tx.` keys), applied after the ICRC is computed
  FaultSpec rx_spec() const {
    FaultSpec s = rx;
    s.loss = rx_loss;
    return s;
  }
  bool enabled() const { return rx_spec().enabled() || tx.enabled(); }
};

enum class PortKind { kUdp, kDpdk };

// The congestion control of a device that UROCE_CC does not name: no rate control (`none`), and
// the notification point on (`none,np=1`): an RNIC answers CE marks with CNPs out of the box
// (ConnectX: roce_np enabled on every priority) whatever its own reaction point does, so a sender
// on an ECN-marking fabric — an RNIC, rxe, a uroce with UROCE_CC=dcqcn — hears of the marks its
// packets collect at a default uroce too. Without marks it costs nothing. `UROCE_CC=none`
// spelled out keeps the NP off, as before.
transport::cc::CcConfig default_cc();

struct DeviceConfig {
  std::string name;  // "uroce0"
  // The device address. An IPv4 device: ipv4 (host byte order), ipv6 unspecified. An IPv6 device
  // (the UDP port only): ipv6, a plain IPv6 address (never IPv4-mapped), with scope_id the
  // interface index of a link-local one; ipv4 then 0. addr() is the address of either family.
  uint32_t ipv4 = 0;
  wire::IpAddr ipv6{};
  uint32_t scope_id = 0;
  bool is_ipv6() const { return ipv6 != wire::IpAddr{}; }
  wire::IpAddr addr() const { return is_ipv6() ? ipv6 : wire::IpAddr(ipv4); }
  std::string netdev;  // interface the address belongs to, if known ("lo", "eth0")
  FaultConfig faults;
  // UROCE_PCAP: capture file for this device's packets ("" = none); see expand_pcap_path.
  std::string pcap_path;
  // UROCE_STATS=1: print the device's counters on stderr when it closes.
  bool print_stats = false;
  // UROCE_EARLY_RETRANSMIT=0|1 (default 1): RC QPs probe for a lost tail before the ACK timeout
  // (transport QpInit::early_retransmit). 0 leaves only the IBTA local ACK timer.
  bool early_retransmit = true;
  // UROCE_SR=0|1 (default 1): RC QPs speak selective repeat (transport QpInit::selective_repeat,
  // docs/selective-repeat.md) and use it with a peer that marks its packets so (uroce);
  // go-back-N with any other. 0: never, and no mark on the wire.
  bool selective_repeat = true;
  // UROCE_ACK_RIDERS=0|1 (default 1): RC QPs let their ACKs ride on their requests to a peer that
  // takes them (uroce), and take those of their peer (transport QpInit::ack_riders,
  // transport/ack_rider.h). 0: every ACK is a packet of its own, and no mark on the wire.
  bool ack_riders = true;
  // UROCE_PATHS=1..64 (default 1): RC QPs spray their RDMA WRITE packets over this many UDP source
  // ports to a peer that speaks selective repeat (transport QpInit::paths, transport/multipath.h).
  uint8_t paths = 1;
  // UROCE_RNR_GRACE=duration (default 10ms, 0 = off): how long an RC message that finds no receive
  // WQE may wait for one before the RNR NAK, at most the QP's min_rnr_timer (transport
  // QpInit::rnr_grace_ns).
  uint64_t rnr_grace_ns = kDefaultRnrGraceNs;
  static constexpr uint64_t kDefaultRnrGraceNs = 10'000'000;
  // UROCE_GSO=0|1|auto (default auto): the UDP port batches sends with UDP GSO and receives
  // with UDP GRO (UdpPortOptions::gso). auto: on when the device's interface is a loopback one,
  // where the kernel hands each batch to the receiving socket whole (64 KiB RDMA WRITE about
  // 5x faster, docs/performance.md); off on other interfaces, where a raw-frame reader on the
  // interface (dumpcap, a DPDK af_packet port on a veth) would see unsegmented super-frames.
  // Captures on lo show them too; uroce's own (UROCE_PCAP) stays one packet per record
  // (docs/configuration.md).
  enum class Gso : uint8_t { kAuto, kOff, kOn };
  Gso gso = Gso::kAuto;
  // UROCE_SHARE=0|1 (default 1): the UDP port shares the address with every other process of the
  // user that opens it (docs/architecture.md, "One device, many processes"); 0 binds it for this
  // process alone, as uroce did before (a second process then cannot open the device).
  bool share = true;
  // UROCE_ICRC=auto|pclmul|isal|zlib (default auto): the CRC-32 routine of every ICRC the process
  // computes (wire::IcrcRoutine; one choice for the process: the same for all its devices).
  wire::IcrcRoutine icrc = wire::IcrcRoutine::kAuto;
  // DSCP (RFC 2474) of data packets: 0 on the UDP port unless dscp= is given, 26 on DPDK (RoCE
  // deployments' class; the QP's GRH traffic_class overrides it).
  uint8_t dscp = 0;
  PortKind port = PortKind::kUdp;
  dpdk::DpdkPortOptions dpdk;  // port == kDpdk: the dpdk(…) body as the port read it
  // UROCE_CC: congestion control of the device's QPs (transport/cc/params.h,
  // docs/congestion-control.md); default default_cc().
  transport::cc::CcConfig cc = default_cc();
};

// Hands one dpdk(…) device body ("dev=…;ip=…;…") to the DPDK port's own parser
// (dpdk_port/options.h) and takes the address and DSCP the engine needs from what it read.
// Errors name the key and the bad value.
bool parse_dpdk_device(std::string_view body, DeviceConfig* d, std::string* err);

// Parses UROCE_DEVICES (or the default when unset: uroce0 on the IPv4 address of the first up,
// non-loopback interface, else 127.0.0.1) and UROCE_FAULTS. On a malformed value returns nullopt
// and a message naming the variable and the bad part.
std::optional<std::vector<DeviceConfig>> load_device_config(std::string* err);
std::optional<std::vector<DeviceConfig>> parse_devices(const std::string& spec, std::string* err);
std::optional<FaultConfig> parse_faults(const std::string& spec, std::string* err);
// Applies a UROCE_CC value to `devices`: sections separated by ';', each `spec` (every device)
// or `device:spec` (that device; it overrides the former), spec as transport/cc/parse.h reads
// it. False and a message naming the variable, the device and the bad field on error.
bool apply_cc(const std::string& value, std::vector<DeviceConfig>& devices, std::string* err);

// The keys of UROCE_FAULTS (src/engine/config_faults.cc, docs/configuration.md): the fault kinds,
// one row per direction (scopes kFaultRx, kFaultTx; `seed` in kFaultSeed), and their `:param=value`
// parameters (scoped by kind).
inline constexpr spec::Scopes kFaultRx = 1, kFaultTx = 2, kFaultSeed = 4;
const spec::Schema<FaultConfig>& fault_schema();
const spec::Schema<FaultSpec>& fault_param_schema();

// What the UROCE_* variables say, each parsed alone; load_device_config() puts them together.
struct Environment {
  std::string devices, faults, cc, pcap;                 // as given ("" = unset)
  std::optional<std::vector<DeviceConfig>> device_list;  // UROCE_DEVICES, parsed
  FaultConfig fault_config;
  bool print_stats = false;
  bool early_retransmit = true;
  bool selective_repeat = true;
  bool ack_riders = true;
  uint8_t paths = 1;
  bool share = true;
  uint64_t rnr_grace_ns = DeviceConfig::kDefaultRnrGraceNs;
  DeviceConfig::Gso gso = DeviceConfig::Gso::kAuto;
  wire::IcrcRoutine icrc = wire::IcrcRoutine::kAuto;
};
// One row per UROCE_* variable, in docs/configuration.md's order. Each variable is a spec of its
// own, so a setter's message is whole ("'yes' is not 0 or 1", or UROCE_FAULTS' own message) and
// load_device_config() puts only the variable's name before it. UROCE_LOG (src/util/log.cc) and
// UROCE_PUBLISH (engine/stats_shm.h) are read where they act, with their own leniency; their rows
// document them and show their effect, and never fail.
const spec::Schema<Environment>& environment_schema();
// Reads every UROCE_* variable of the table into *env, each alone (an empty one counts as unset);
// false and a message naming the variable at the first malformed one.
bool read_environment(Environment* env, std::string* err);
// For each UROCE_* variable in `envp` (NAME=value strings, null-terminated, as `environ`) that is
// no variable of the table but one or two letters away from one — UROCE_DEVICE for UROCE_DEVICES,
// which would otherwise fall back to the default device in silence — a line saying so, with the
// name meant. Names further from every known one (a script's own UROCE_RUN) are not warned of.
std::vector<std::string> misspelt_variables(const char* const* envp);

// The capture file of `device` for the UROCE_PCAP pattern: %p becomes the process id, %d the
// device name, %% a '%'. With several devices and no %d, the device name is inserted before the
// extension (cap.pcap → cap.uroce1.pcap) so each device gets its own file.
std::string expand_pcap_path(const std::string& pattern, const std::string& device,
                             bool several_devices);

// The device used when UROCE_DEVICES is unset or empty.
DeviceConfig default_device_config();
// The first IPv4 address of interface `netdev`; nullopt and a message if it has none.
std::optional<uint32_t> resolve_netdev_ipv4(const std::string& netdev, std::string* err);
// The first IPv6 address of interface `netdev` that is not link-local (else its link-local one,
// with *scope_id its index); nullopt and a message if it has none.
std::optional<wire::IpAddr> resolve_netdev_ipv6(const std::string& netdev, uint32_t* scope_id,
                                                std::string* err);
// "a.b.c.d" of a host-order address.
std::string format_ipv4(uint32_t ip);
// The device address as text: "a.b.c.d", or the IPv6 text with "%ifname" for a link-local one.
std::string format_device_addr(const DeviceConfig& d);

}  // namespace uroce
