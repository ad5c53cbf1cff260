// The experiments `uroce-sim` runs (docs/simulator.md): a topology — dumbbell, N:1 incast,
// leaf-spine — built from the fabric flags every subcommand shares, a workload, a run, and the
// results: a summary (JSON), time series (CSV) and a capture of one link (pcap). The CLI
// (main.cc) parses flags into these options; the CI's small experiment variants
// (tests/sim/experiments.sh) and the labs (lab.h) run the same functions. The set-up and the run,
// the dumbbell and the incast: scenario.cc; the leaf-spine and its workloads:
// scenario_leafspine.cc; a run's results: scenario_collect.cc; the summaries' JSON:
// scenario_json.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/fabric.h"

namespace uroce::sim {

// What every topology shares.
struct FabricOptions {
  uint64_t link_bps = 40'000'000'000ull;  // host links (and, unless fabric_bps, every link)
  uint64_t fabric_bps = 0;                // leaf-spine links; 0 = link_bps
  Time delay = 1000;                      // per link, ns
  ibv_mtu mtu = IBV_MTU_1024;
  transport::cc::CcConfig cc;  // every host's QPs
  RedConfig red{.enabled = true};
  uint64_t buffer_bytes = 0;  // per switch (shared) or per egress port; 0 = unlimited
  BufferMode buffer_mode = BufferMode::kShared;
  PfcConfig pfc;  // pfc.classes: the lossless classes (RoCE's class 3 unless told otherwise)
  EcmpHash hash = EcmpHash::kCrc32;
  // The DSCP hosts send data and ACKs with (HostConfig::data_dscp); its class selector is the
  // traffic class the switches queue and pause them in (sim_port.h dscp_class): 26 → class 3.
  uint8_t dscp = 26;
  // IP MTUs of given links, by name ("leaf0-spine1"; Fabric::set_link_mtu); unknown names are
  // an error naming the links.
  std::vector<std::pair<std::string, uint32_t>> link_mtu;
  uint32_t ring = 16;  // NIC transmit ring, frames
  uint8_t qp_timeout = 14;
  // Every QP's selective repeat and paths (QpParams): go-back-N and one path unless told.
  bool selective_repeat = false;
  uint8_t paths = 1;
  // Warm connections (FlowSpec::warmup): every flow writes 64 bytes at time 0 and starts
  // kWarmupLead later than it would (completion times count from its start).
  bool warmup = false;
  // Probability that each frame a switch sends to a host is lost (LinkSpec::loss_to_a): every
  // packet, data or ACK, crosses exactly one such link in every topology, so this is the
  // end-to-end loss rate per packet and direction. Drawn from each link's seeded stream.
  double loss = 0;
  uint64_t seed = 1;
  Time sample = 0;                         // CSV sampling interval; 0 = duration / 1000
  std::string csv, json, pcap, pcap_link;  // output files ("" = none) and the captured link
  std::string pfc_report;                  // the PFC counters as text ("" = none, "-": stdout)
};

inline constexpr Time kWarmupLead = 100 * kUs;

// Per-flow results.
struct FlowResult {
  std::string name, src, dst;
  uint16_t src_port = 0;
  double goodput_gbps = 0;  // in the window
  uint64_t bytes = 0;       // accepted by the receiver, in the window
  uint64_t messages = 0;    // completed
  uint64_t wanted = 0;      // the flow's message count (FlowSpec::messages); 0: a stream
  double fct_us = 0;        // last message's completion time (flows with a message count)
  uint64_t retransmitted = 0, timeouts = 0, cnps_handled = 0;
  uint64_t errors = 0;            // completions in error (e.g. retry exceeded: the QP is in ERROR)
  std::vector<std::string> path;  // switch egress ports the flow's packets take ("leaf0:p17")
};

// PFC counters of one port and class, `show interface … priority-flow-control`.
struct PortPause {
  std::string port;  // "leaf0->spine1", "h3->leaf0"
  uint64_t tx_pause = 0, rx_pause = 0, tx_resume = 0, rx_resume = 0;
  double pause_us = 0;
};

// Everything one port did in the window, per class where the switch counts per class:
// what `show interface …` and `show interface … priority-flow-control` list.
struct PortReport {
  std::string port;   // "spine0->leaf1": spine0's port towards leaf1; "h3->leaf0": a host's NIC
  bool host = false;  // a host's NIC (its queue is the transmit ring), not a switch port
  struct Class {
    uint64_t tx_pause = 0, rx_pause = 0, tx_resume = 0, rx_resume = 0;
    double pause_us = 0;  // time this port's transmission of the class was held
    uint64_t drops = 0;   // frames for this egress dropped for want of buffer
  } prio[kPriorities];
  uint64_t mtu_drops = 0;  // frames longer than the port's MTU (switch.h)
  uint64_t ecn_marks = 0;  // frames this port marked CE
  uint64_t tx_frames = 0;
  double queue_max_kib = 0;  // its egress queue, inside the window
};

struct LinkUse {
  std::string from_to;  // "leaf0->spine1"
  double util_pct = 0;  // of the window
  double queue_max_kib = 0;
};

// This machine's steady clock in seconds: what a run's `wall_s` is measured with.
double now_s();

// Totals over a run, the keys every subcommand reports.
struct RunResult {
  double duration_us = 0, window_begin_us = 0, window_end_us = 0;
  uint64_t events = 0;
  double wall_s = 0, events_per_s = 0;
  uint64_t drops = 0;      // by switches: no buffer, or longer than a port's MTU
  uint64_t mtu_drops = 0;  // of which longer than a port's MTU
  uint64_t marks = 0;      // CE marks by switches
  uint64_t cnps = 0;       // CNPs sent by NPs
  uint64_t pfc_pause_frames = 0, pfc_resume_frames = 0;  // sent by switches
  double pfc_pause_time_us = 0;                          // summed over every paused port and class
  uint64_t lost_frames = 0;  // dropped by the links' random loss (--loss)
  uint64_t retransmitted_packets = 0, timeouts = 0, probe_timeouts = 0;
  uint64_t sr_ooo_accepted = 0, sr_sacks_sent = 0, sr_selective_resends = 0;  // selective repeat
  uint64_t mp_sprayed = 0, mp_rotations = 0, mp_ecn_rotations = 0;            // multipath
  uint64_t errors = 0;  // completions in error
  // Every completed message of every flow whose completion falls in the window: completion
  // time (post, or arrival when open loop, to the send completion), µs.
  uint64_t messages = 0;
  double message_fct_mean_us = 0, message_fct_p50_us = 0, message_fct_p99_us = 0,
         message_fct_max_us = 0;
  std::vector<FlowResult> flows;
  std::vector<PortPause> pauses;  // ports that sent or received any PAUSE
  std::vector<LinkUse> links;     // every direction of every link
  std::vector<PortReport> ports;  // every port (as `links`), over the window
  std::string series;             // the time series (the CSV --csv writes)
};

struct DumbbellOptions {
  FabricOptions fabric;
  uint32_t flows = 2;
  bool stagger = false;  // flows start one after another (stagger_gap apart)
  Time stagger_gap = 0;  // 0 = duration / (2 · flows)
  Time duration = 20 * kMs;
  Time window_begin = kNever;  // kNever: the second half of the run
  Time window_end = kNever;
  uint64_t msg_bytes = 1 << 20;  // each flow streams WRITEs of this size, 2 outstanding
};
struct DumbbellResult {
  RunResult run;
  double util_pct = 0, jain = 0;
  double queue_mean_kib = 0, queue_p99_kib = 0, queue_max_kib = 0;
  double cnp_per_s = 0;
  std::vector<double> flow_gbps;
};
DumbbellResult run_dumbbell(const DumbbellOptions& o);

struct IncastOptions {
  FabricOptions fabric;
  uint32_t senders = 16;
  uint64_t msg_bytes = 1 << 20;
  Time limit = 1000 * kMs;  // the run stops here if messages are still incomplete
};
struct IncastResult {
  RunResult run;
  double fct_max_us = 0, fct_mean_us = 0, ideal_us = 0;
  double queue_max_kib = 0;
  bool completed = false;  // every message completed
};
IncastResult run_incast(const IncastOptions& o);

// A leaf-spine fabric: L leaves, S spines, H hosts per leaf (host l·H + i on leaf l), every
// leaf linked to every spine. The workload is `flows` (host indices as above), or a built-in
// scenario:
//  "pfc-spread" (experiment 3, the troubleshooting case): one elephant from host 0 of every leaf
//    but leaf 1 to a host of leaf 1, their UDP source ports chosen so that every leaf hashes
//    them onto spine 0 — its link down to leaf 1 is congested; a victim flow from host 1 of leaf
//    0 to leaf 2 whose source port also hashes onto spine 0, so it never crosses the congested
//    link. With `entropy`, elephant k's source port is chosen to hash onto spine k mod S
//    instead, and the victim's onto the next spine: what using ECMP's entropy well does.
//    Needs L >= 3, S >= 2, H >= 2.
//  "mixed" (experiment 5, scale): every even host streams 256 KiB WRITEs to the host H places
//    on (another leaf); every odd host sends 16 KiB messages to a random host, open loop at
//    20 % of its link; and leaf 0's hosts write 64 KiB each to host H−1 of the last leaf
//    (an incast) at a quarter of the run. Needs L >= 2.
struct LeafSpineOptions {
  FabricOptions fabric;
  uint32_t leaves = 4, spines = 2, hosts_per_leaf = 4;
  Time duration = 10 * kMs;
  Time window_begin = kNever, window_end = kNever;  // default: the second half
  std::vector<FlowSpec> flows;
  std::string scenario;  // "", "pfc-spread" or "mixed"
  bool entropy = false;  // pfc-spread: spread the elephants' source ports
};
struct LeafSpineResult {
  RunResult run;
  int64_t victim = -1;  // pfc-spread: the victim's index in run.flows
  // mixed: completion times of the short messages, µs.
  double short_fct_mean_us = 0, short_fct_p99_us = 0;
  uint64_t short_messages = 0;
};
LeafSpineResult run_leafspine(const LeafSpineOptions& o);
// Whether `name` is a built-in scenario that fits the topology; false and *err if not.
bool check_leafspine_scenario(const std::string& name, uint32_t leaves, uint32_t spines,
                              uint32_t hosts_per_leaf, std::string* err);
// Reads a workload file (docs/simulator.md): one flow per line,
//   name src dst msg_bytes messages depth start_us [mean_gap_us]
// (messages 0: a stream to the end of the run; '#' starts a comment). false and *err naming
// the line on a malformed one or a host outside [0, hosts).
bool parse_workload(const std::string& text, uint32_t hosts, std::vector<FlowSpec>* flows,
                    std::string* err);

// The summaries, as `uroce-sim … --json` writes them.
std::string to_json(const DumbbellOptions& o, const DumbbellResult& r);
std::string to_json(const IncastOptions& o, const IncastResult& r);
std::string to_json(const LeafSpineOptions& o, const LeafSpineResult& r);

// Every QP's congestion control from the fabric flags --cc, --preset and --set: the simulator
// wakes every QP exactly on time, so paced packets are spaced exactly (pacer_burst 0) unless
// `set` says otherwise. nullopt and *err on a bad spec.
std::optional<transport::cc::CcConfig> fabric_cc(const std::string& algorithm,
                                                 const std::string& preset, const std::string& set,
                                                 std::string* err);

// The PFC counters of every port over the window, one line per port and priority — the
// priorities PFC acts on, and any other with a PAUSE — as a switch's `show interface …
// priority-flow-control` lists them (`--pfc-report`, docs/simulator.md).
std::string pfc_report(const FabricOptions& o, const RunResult& r);

class JsonWriter;
// The "flows" key of the summaries: every flow's name, hosts, UDP source port, goodput,
// messages (completed, and `wanted`: 0 for a stream), completion time, retransmissions,
// timeouts, CNPs handled, completions in error and path.
void flows_json(JsonWriter& j, const RunResult& r);

// Jain's fairness index of `x` (1 = equal shares).
double jain_index(const std::vector<double>& x);

}  // namespace uroce::sim
