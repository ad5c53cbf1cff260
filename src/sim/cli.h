// uroce-sim's command line: the subcommands and one table of every flag (transport/spec/spec.h:
// name, the subcommands it belongs to, setter, default, one-line doc), read by the parser every
// spec of uroce shares, so an unknown flag, a flag of another subcommand, a flag given twice and
// a malformed value are refused as they are in UROCE_FAULTS or UROCE_CC. `--help` is made from
// the same table. A setter checks its own flag (a number, its range, a name); what depends on
// several flags (the window inside the duration, XON below XOFF, …) is checked by main.cc when
// it builds the run. docs/simulator.md documents every flag.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/plot.h"
#include "transport/spec/spec.h"

namespace uroce::sim::cli {

// The subcommands, as the flags' scopes.
enum Command : spec::Scopes {
  kRp = 1,
  kDumbbell = 2,
  kIncast = 4,
  kLeafSpine = 8,
  kPlot = 16,
  kLab = 32,
};
inline constexpr spec::Scopes kFabric = kDumbbell | kIncast | kLeafSpine;

struct RpFlags {
  std::vector<double> cnp_us;
  double duration_us = 0;
  double line_gbps = 40;
  double start_gbps = -1;  // default: the line rate
  std::string preset = "paper";
  std::string set;
  std::string csv = "-";
};

// The fabric flags every topology takes, as given.
struct FabricFlags {
  double link_gbps = 40;
  double fabric_gbps = 0;  // leafspine only; 0 = link_gbps
  double delay_us = 1;
  uint32_t mtu = 1024;
  std::string cc = "dcqcn";
  std::string preset = "paper";
  std::string set;
  std::string mark = "dequeue";
  double kmin_kb = 5, kmax_kb = 200, pmax = 0.01;
  double buffer_kb = 0;
  std::string buffer_mode = "shared";
  bool pfc = false;
  double xoff_kb = -1, xon_kb = -1;  // -1: not given (96, 64 with --pfc)
  uint32_t quanta = 0xffff;
  std::string hash = "crc32";
  uint32_t dscp = 26;
  int32_t pfc_prio = -1;  // -1: not given (3 with --pfc)
  std::string link_mtu;   // NAME=BYTES,…
  uint32_t ring = 16;
  uint32_t qp_timeout = 14;
  bool sr = false;
  bool warmup = false;
  uint32_t paths = 1;
  double loss = 0;
  uint64_t seed = 1;
  double sample_us = 0;
  std::string json, csv, pcap, pcap_link, pfc_report;
};

struct DumbbellFlags {
  uint32_t flows = 2;
  std::string start = "sync";
  double stagger_us = 0;
  double duration_ms = 20;
  std::string window;
  uint64_t msg_bytes = 1 << 20;
};

struct IncastFlags {
  uint32_t senders = 16;
  uint64_t msg_bytes = 1 << 20;
  double limit_ms = 1000;
};

struct LeafSpineFlags {
  uint32_t leaves = 4, spines = 2, hosts_per_leaf = 4;
  double duration_ms = 10;
  std::string window;
  std::string scenario, workload;
  bool entropy = false;
};

struct PlotFlags {
  std::string csv, svg;
  PlotSpec spec;
  std::string y;
};

struct LabFlags {
  std::string name;  // the lab (the argument after `lab`)
  bool list = false, quick = false;
  std::string svg, json;
};

// Everything the flags set; the subcommand's part is used.
struct Flags {
  Command command = kRp;
  RpFlags rp;
  FabricFlags fabric;
  DumbbellFlags dumbbell;
  IncastFlags incast;
  LeafSpineFlags leafspine;
  PlotFlags plot;
  LabFlags lab;
};

// The subcommands: name, scope, one line.
struct Subcommand {
  const char* name;
  Command command;
  const char* doc;
};
const std::vector<Subcommand>& subcommands();

const spec::Schema<Flags>& schema();

// Reads `args` (argv after the program name): the subcommand, then its flags (`lab` takes the
// lab's name first). Returns false
// with *err on a bad command line, and false with an empty *err and *help set when the command
// line asks for help (--help, -h, or nothing).
bool parse(const std::vector<std::string_view>& args, Flags* flags, std::string* help,
           std::string* err);

}  // namespace uroce::sim::cli
