#include "tools/perf/options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

namespace uroce::perf {

const char* conn_name(Conn c) {
  switch (c) {
    case Conn::kRC:
      return "RC";
    case Conn::kUC:
      return "UC";
    case Conn::kUD:
      return "UD";
  }
  return "?";
}

const char* verb_title(Verb v) {
  switch (v) {
    case Verb::kSend:
      return "Send";
    case Verb::kWrite:
      return "RDMA_Write";
    case Verb::kRead:
      return "RDMA_Read";
    case Verb::kAtomic:
      return "Atomic";
  }
  return "?";
}

const char* atomic_name(AtomicOp a) {
  return a == AtomicOp::kCmpAndSwap ? "CMP_AND_SWAP" : "FETCH_AND_ADD";
}

namespace {

struct TestDef {
  const char* name;
  Verb verb;
  Kind kind;
};
constexpr TestDef kTests[] = {
    {"send_lat", Verb::kSend, Kind::kLatency},  {"write_lat", Verb::kWrite, Kind::kLatency},
    {"read_lat", Verb::kRead, Kind::kLatency},  {"atomic_lat", Verb::kAtomic, Kind::kLatency},
    {"send_bw", Verb::kSend, Kind::kBandwidth}, {"write_bw", Verb::kWrite, Kind::kBandwidth},
    {"read_bw", Verb::kRead, Kind::kBandwidth}, {"atomic_bw", Verb::kAtomic, Kind::kBandwidth},
};

// perftest options uroce-perf knows but does not implement, with the reason it gives.
struct Refused {
  const char* names;  // CLI11 spelling
  bool takes_value;
  const char* reason;
};
constexpr Refused kRefused[] = {
    {"-R,--rdma_cm", false,
     "connecting through rdma_cm is not implemented; uroce-perf exchanges QP numbers over TCP "
     "like perftest's default (drop -R on both sides)"},
    {"-z,--com_rdma_cm", false, "exchanging set-up data over rdma_cm is not implemented"},
    {"-O,--dualport", false, "dual-port runs are not implemented"},
    {"-g,--mcg", false, "multicast runs are not implemented"},
    {"-M,--MGID", true, "multicast runs are not implemented"},
    {"-C,--report-cycles", false,
     "uroce-perf measures with CLOCK_MONOTONIC, not CPU cycles: reports are in microseconds"},
    {"-U,--report-unsorted", false,
     "samples are kept in a histogram, not one by one; -H prints the histogram"},
    {"-W,--report-counters", true,
     "sysfs counters are not read; uroce's own counters of both sides are reported when the "
     "device is uroce"},
    {"-T,--tos", true, "-T applies to rdma_cm QPs only, which are not implemented"},
    {"-X,--vector", true, "completion vectors are not implemented"},
    {"-f,--margin", true, "duration runs measure the whole period; there is no margin"},
    {"-L,--hop_limit", true, "the hop limit is fixed at 255 (perftest's value for RoCE)"},
    {"--use-srq", false, "shared receive queues are not implemented in uroce-perf"},
    {"--cpu_util", false,
     "the CPU time of both processes is always reported (user and system, per second of run)"},
    {"--out_json", false, "use --json or --json-file for a JSON report"},
    {"--out_json_file", true, "use --json-file FILE for a JSON report"},
    {"--run_infinitely", false, "use -D SECONDS for a long run"},
    {"--reversed", false, "swap the server and client command lines instead"},
    {"--report-per-port", false, "dual-port runs are not implemented"},
    {"--odp", false, "on-demand paging is not implemented"},
    {"--mmap", true, "buffers from mmap'd files are not implemented"},
    {"--mmap-offset", true, "buffers from mmap'd files are not implemented"},
    {"--use_hugepages", false, "huge-page buffers are not implemented"},
    {"--mr_per_qp", false, "one memory region covers every QP"},
    {"--ipv6", false, "the GID is chosen with -x"},
    {"--source_ip", true, "the TCP set-up uses the routing table's source address"},
    {"--dlid", true, "destination LIDs come from the peer"},
    {"--force-link", true, "the link layer is the device's"},
    {"--tclass", true, "the traffic class is fixed at 0"},
    {"--wait_destroy", true, "not implemented"},
    {"--retry_count", true, "applies to rdma_cm only, which is not implemented"},
    {"--rate_limit", true, "rate limiting is not implemented"},
    {"--rate_units", true, "rate limiting is not implemented"},
    {"--rate_limit_type", true, "rate limiting is not implemented"},
    {"--burst_size", true, "rate limiting is not implemented"},
    {"--typical_pkt_size", true, "rate limiting is not implemented"},
    {"--recv_post_list", true, "receives are posted one at a time"},
    {"--flows", true, "multiple flows are not implemented"},
    {"--flows_burst", true, "multiple flows are not implemented"},
    {"--latency_gap", true, "a gap between latency iterations is not implemented"},
    {"--output", true, "use --json for machine-readable results"},
    {"--aes_xts", false, "encryption offloads do not exist on a software device"},
};

// The name CLI11 reports an option by: its first long name, else its short one.
std::string display_name(const char* names) {
  std::string s(names);
  auto comma = s.find(',');
  if (comma != std::string::npos) return s.substr(comma + 1) + " (" + s.substr(0, comma) + ")";
  return s;
}

ParseResult fail(const std::string& prog, const std::string& msg) {
  ParseResult r;
  r.code = 2;
  r.text = prog + ": " + msg + "\n(see `" + prog + " --help`)\n";
  return r;
}

// perftest's dependent defaults (force_dependecies in perftest_parameters.c), applied after the
// flags so that explicit values win where perftest lets them.
void apply_defaults(Options& o, bool size_given, bool iters_given, bool tx_given, bool rx_given) {
  if (!size_given) o.size = o.verb == Verb::kAtomic ? 8 : o.latency() ? 2 : 65536;
  if (!iters_given && o.duration == 0)
    o.iters = o.verb == Verb::kWrite && !o.latency() ? 5000 : 1000;
  if (o.duration > 0) o.iters = 0;
  if (!tx_given) o.tx_depth = o.latency() ? 1 : 128;
  if (!rx_given) o.rx_depth = o.verb == Verb::kSend ? 512 : 1;
  if (o.duration == 0) {
    o.tx_depth = static_cast<int>(std::min<uint64_t>(o.tx_depth, o.iters));
    if (o.verb == Verb::kSend)
      o.rx_depth = static_cast<int>(std::min<uint64_t>(o.rx_depth, o.iters));
  }
  if (!o.cq_mod_given) {
    o.cq_mod = 100;
    // One CQE per WR for large messages: the BW figure would otherwise lag by up to 99 of them.
    if (o.size > static_cast<uint64_t>(kCqModSizeLimit) && o.conn != Conn::kUD && !o.all_sizes &&
        !o.events)
      o.cq_mod = 1;
  }
  o.cq_mod = std::min(o.cq_mod, o.tx_depth);
  o.post_list = std::min(o.post_list, o.tx_depth);
  if (o.verb == Verb::kRead || o.verb == Verb::kAtomic) o.inline_size = 0;
}

}  // namespace

std::string test_names() {
  std::string s;
  for (const TestDef& t : kTests) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

ParseResult parse_options(const std::vector<std::string>& argv) {
  const std::string prog = "uroce-perf";
  const std::string usage =
      "usage: uroce-perf TEST [perftest options] [SERVER]\n"
      "TEST is one of " +
      test_names() +
      ".\nWithout SERVER it waits for a client; with SERVER it connects to it (TCP, port -p).\n"
      "`uroce-perf TEST --help` lists the options.\n";
  if (argv.size() < 2) return fail(prog, "no test given\n" + usage);
  std::string test = argv[1];
  if (test == "-h" || test == "--help") {
    ParseResult r;
    r.text = usage;
    return r;
  }
  if (test == "-V" || test == "--version") {
    ParseResult r;
    r.text = "uroce-perf " UROCE_PERF_VERSION " (speaks perftest 6.06's set-up protocol)\n";
    return r;
  }
  if (test.rfind("ib_", 0) == 0) test = test.substr(3);  // `uroce-perf ib_write_bw …` works too
  const TestDef* def = nullptr;
  for (const TestDef& t : kTests)
    if (test == t.name) def = &t;
  if (!def) return fail(prog, "unknown test '" + argv[1] + "'; the tests are " + test_names());

  Options o;
  o.test = def->name;
  o.verb = def->verb;
  o.kind = def->kind;
  const std::string me = prog + " " + o.test;

  CLI::App app{
      me + ": perftest's " + "ib_" + o.test +
          " over any verbs device, with latency percentiles, CPU time, uroce counters, "
          "--json, --plot and --check.\nWithout SERVER: wait for a client. Flags as perftest "
          "6.06 (ib_" +
          o.test + ").",
      me};
  app.set_help_flag("-h,--help", "Show this help");
  app.allow_extras(false);

  std::string conn = "RC", atomic = "FETCH_AND_ADD";
  uint64_t size = 0, iters = 0;
  int tx = 0, rx = 0;
  app.add_option("-c,--connection", conn, "Connection type RC/UC/UD (default RC)");
  app.add_option("-d,--ib-dev", o.device, "Use this device (default: the first one found)");
  app.add_option("-i,--ib-port", o.ib_port, "Port of the device (default 1)")
      ->check(CLI::Range(1, 255));
  app.add_option("-x,--gid-index", o.gid_index,
                 "GID index (default: IB none; Ethernet the first RoCE v2 GID)")
      ->check(CLI::Range(0, 255));
  auto* size_opt =
      app.add_option("-s,--size", size, "Message size in bytes; K and M suffixes as perftest")
          ->transform(CLI::AsSizeValue(false))
          ->check(CLI::Range(uint64_t{1}, kMaxSize));
  app.add_flag("-a,--all", o.all_sizes, "Run sizes 2, 4, … 2^23 (UD: up to the MTU)");
  auto* iters_opt = app.add_option("-n,--iters", iters, "Iterations per QP and size (at least 5)")
                        ->check(CLI::Range(kMinIters, uint64_t{100000000}));
  auto* dur_opt =
      app.add_option("-D,--duration", o.duration, "Run for SECONDS instead of -n iterations")
          ->check(CLI::Range(1, 1000000));
  app.add_option("-m,--mtu", o.mtu, "Path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's)")
      ->check(CLI::IsMember({256, 512, 1024, 2048, 4096}));
  app.add_option("-q,--qp", o.qps, "Number of QPs (default 1)")->check(CLI::Range(1, 16384));
  auto* tx_opt = app.add_option("-t,--tx-depth", tx, "Send queue depth (bw 128, lat 1)")
                     ->check(CLI::Range(1, 15000));
  auto* rx_opt = app.add_option("-r,--rx-depth", rx, "Receives posted per QP (SEND tests, 512)")
                     ->check(CLI::Range(1, 16384));
  auto* cqm_opt = app.add_option("-Q,--cq-mod", o.cq_mod, "One CQE every N WRs (default 100)")
                      ->check(CLI::Range(1, 1024));
  app.add_option("-l,--post_list", o.post_list, "WRs per post call (default 1)")
      ->check(CLI::Range(1, 4096));
  app.add_option("-I,--inline_size", o.inline_size, "Send up to this many bytes inline")
      ->check(CLI::Range(0, 912));
  app.add_flag("-e,--events", o.events, "Sleep on completion events (default: poll)");
  app.add_flag("-b,--bidirectional", o.bidirectional, "Both sides send (bandwidth tests)");
  app.add_flag("--report_gbits", o.report_gbits, "Bandwidth in Gb/s (10^9 bit) instead of MB/s");
  app.add_option("-o,--outs", o.out_reads, "Outstanding READs/atomics (default: device maximum)")
      ->check(CLI::Range(1, 65536));
  app.add_flag("--use_old_post_send", o.old_post_send, "Post with ibv_post_send, not ibv_wr_*");
  app.add_option("-p,--port", o.tcp_port, "TCP port of the set-up exchange (default 18515)");
  app.add_option("-u,--qp-timeout", o.qp_timeout, "QP timeout exponent (4.096 us * 2^N; 14)")
      ->check(CLI::Range(0, 31));
  app.add_option("-S,--sl", o.sl, "Service level (default 0)")->check(CLI::Range(0, 15));
  app.add_option("--pkey_index", o.pkey_index, "P_Key index (default 0)")
      ->check(CLI::Range(0, 65535));
  app.add_flag("--dont_xchg_versions", o.dont_xchg_versions,
               "Skip the version and MTU exchange (as perftest; loses uroce-perf's extras)");
  app.add_flag("-N,--noPeak", o.no_peak, "Do not compute the peak bandwidth");
  app.add_flag("--report-both", o.report_both, "Bidirectional: also print each side's figures");
  app.add_flag("-H,--report-histogram", o.print_histogram, "Print the latency histogram");
  app.add_option("-A,--atomic_type", atomic, "CMP_AND_SWAP or FETCH_AND_ADD (default)");
  app.add_flag("--perform_warm_up", o.warm_up, "Post a send queue's worth of WRs before measuring");
  app.add_option("-w,--limit_bw", o.limit_bw, "Exit with failure below this average bandwidth")
      ->check(CLI::PositiveNumber);
  app.add_option("-y,--limit_msgrate", o.limit_msgrate,
                 "Exit with failure below this message rate (Mpps)")
      ->check(CLI::PositiveNumber);
  bool ignored = false;
  app.add_flag("-F,--CPU-freq", ignored,
               "Accepted for compatibility: uroce-perf does not depend on the CPU frequency");
  app.add_flag("--disable_pcie_relaxed", ignored,
               "Accepted for compatibility: uroce-perf never asks for relaxed ordering");
  app.add_option("SERVER", o.server, "Connect to this server (name or address)");

  auto* threads_opt = app.add_option("--threads", o.threads,
                                     "Spread the QPs over this many polling threads (default 1)")
                          ->check(CLI::Range(1, 1024));
  app.add_flag("--json", o.json, "Print one JSON document instead of the table");
  app.add_option("--json-file", o.json_file, "Also write the JSON document to this file");
  app.add_option("--plot", o.plot_file,
                 "Write an SVG plot: the latency histogram, or (-a) bandwidth/latency by size");
  app.add_flag("--check", o.check,
               "Verify every byte moved at the end of the run (needs uroce-perf on both sides)");
  app.add_option("--stall-timeout", o.stall_timeout,
                 "Give up after this many seconds without progress (default 30)")
      ->check(CLI::Range(0.1, 86400.0));

  std::vector<std::pair<const Refused*, CLI::Option*>> refused;
  std::vector<std::string> refused_values(std::size(kRefused));
  for (size_t i = 0; i < std::size(kRefused); ++i) {
    const Refused& r = kRefused[i];
    CLI::Option* opt = r.takes_value ? app.add_option(r.names, refused_values[i], "")
                                     : app.add_flag(std::string(r.names));
    opt->group("");  // hidden from --help
    refused.emplace_back(&r, opt);
  }

  std::vector<std::string> args(argv.begin() + 2, argv.end());
  std::reverse(args.begin(), args.end());  // CLI11 consumes from the back
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    ParseResult r;
    r.text = app.help();
    return r;
  } catch (const CLI::ParseError& e) {
    return fail(me, e.what());
  }
  for (auto& [r, opt] : refused)
    if (opt->count()) return fail(me, display_name(r->names) + " is not supported: " + r->reason);

  if (conn == "RC") {
    o.conn = Conn::kRC;
  } else if (conn == "UC") {
    o.conn = Conn::kUC;
  } else if (conn == "UD") {
    o.conn = Conn::kUD;
  } else if (conn == "XRC" || conn == "DC" || conn == "SRD" || conn == "RawEth") {
    return fail(me, "-c " + conn + " is not supported: uroce-perf runs RC, UC and UD");
  } else {
    return fail(me, "-c: unknown connection type '" + conn + "' (RC, UC or UD)");
  }
  if (atomic == "FETCH_AND_ADD") {
    o.atomic_op = AtomicOp::kFetchAndAdd;
  } else if (atomic == "CMP_AND_SWAP") {
    o.atomic_op = AtomicOp::kCmpAndSwap;
  } else {
    return fail(me, "-A: unknown atomic type '" + atomic + "' (CMP_AND_SWAP or FETCH_AND_ADD)");
  }

  // What each operation allows (IBTA 9.2 / table 37: READ and atomics are RC only; UD carries
  // SEND only).
  if ((o.verb == Verb::kRead || o.verb == Verb::kAtomic) && o.conn != Conn::kRC)
    return fail(me, std::string(o.verb == Verb::kRead ? "RDMA READ needs" : "atomics need") +
                        " a reliable connection: -c RC (UC and UD do not carry them)");
  if (o.verb == Verb::kWrite && o.conn == Conn::kUD)
    return fail(me, "RDMA WRITE needs a connection: -c RC or -c UC (UD carries SEND only)");
  if (o.verb == Verb::kAtomic && *size_opt && size != 8)
    return fail(me, "atomics are 8 bytes: -s 8 (or leave -s out)");
  if (o.verb == Verb::kAtomic && o.all_sizes)
    return fail(me, "-a: atomics have one size (8 bytes)");
  if (*dur_opt && *iters_opt)
    return fail(me, "-D and -n exclude each other: run for a time or a count");
  if (*dur_opt && o.all_sizes) return fail(me, "-D and -a exclude each other");
  if (o.bidirectional && o.latency())
    return fail(me, "-b applies to bandwidth tests (a latency test is a ping-pong already)");
  if (o.events && o.verb == Verb::kWrite && o.latency())
    return fail(me, "-e does not apply to write_lat: it polls memory for the peer's write");
  if (o.verb != Verb::kAtomic && atomic != "FETCH_AND_ADD")
    return fail(me, "-A applies to the atomic tests");
  if (*rx_opt && o.verb != Verb::kSend) return fail(me, "-r applies to the SEND tests");
  if (o.out_reads && o.verb != Verb::kRead && o.verb != Verb::kAtomic)
    return fail(me, "-o applies to the READ and atomic tests");
  if (*threads_opt && o.threads > o.qps)
    return fail(me, "--threads " + std::to_string(o.threads) + " needs at least as many QPs (-q " +
                        std::to_string(o.threads) + ")");
  if (o.check && o.dont_xchg_versions)
    return fail(me, "--check needs the version exchange (it tells uroce-perf from perftest)");

  o.size = size;
  o.iters = iters;
  o.tx_depth = tx;
  o.rx_depth = rx;
  o.cq_mod_given = cqm_opt->count() > 0;
  apply_defaults(o, size_opt->count() > 0, iters_opt->count() > 0, tx_opt->count() > 0,
                 rx_opt->count() > 0);
  if (o.all_sizes) o.size = kMaxAllSize;  // the buffers are sized for the largest

  ParseResult r;
  r.run = true;
  r.options = std::move(o);
  return r;
}

}  // namespace uroce::perf
