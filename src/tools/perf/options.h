// uroce-perf's command line: `uroce-perf TEST [perftest flags] [SERVER]`.
//
// The flags are perftest's (4.5, "version 6.06"), with its defaults and its dependent defaults
// (CQ moderation off for large messages, depths capped by the iteration count…), so that a
// command line written for ib_write_bw works unchanged and the two programs configure their QPs
// alike. perftest options uroce-perf does not implement are recognised and refused by name with
// the reason, never silently ignored. uroce-perf's own options are long-only: --threads, --json,
// --json-file, --plot, --check, --stall-timeout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uroce::perf {

enum class Verb { kSend, kWrite, kRead, kAtomic };
enum class Kind { kLatency, kBandwidth };
enum class Conn { kRC, kUC, kUD };
enum class AtomicOp { kFetchAndAdd, kCmpAndSwap };

const char* conn_name(Conn c);        // "RC", "UC", "UD"
const char* verb_title(Verb v);       // perftest's test titles: "Send", "RDMA_Write", …
const char* atomic_name(AtomicOp a);  // "FETCH_AND_ADD", "CMP_AND_SWAP"

// perftest's limits and defaults (perftest_parameters.h), where uroce-perf keeps them.
inline constexpr uint64_t kMaxAllSize = uint64_t{1} << 23;  // -a runs 2 .. 2^23
inline constexpr uint64_t kMaxSize = 0x7fffffff;            // -s at most UINT_MAX / 2
inline constexpr uint64_t kMinIters = 5;
inline constexpr uint16_t kDefaultTcpPort = 18515;
inline constexpr uint32_t kUdGrh = 40;        // a UD receive buffer starts with room for the GRH
inline constexpr int kCqModSizeLimit = 8192;  // larger messages default to one CQE per WR

struct Options {
  // The test (the subcommand).
  std::string test;  // "send_lat", …
  Verb verb = Verb::kSend;
  Kind kind = Kind::kLatency;

  // perftest's flags.
  Conn conn = Conn::kRC;   // -c
  std::string device;      // -d; empty: the first device
  int ib_port = 1;         // -i
  int gid_index = -1;      // -x; -1: RoCE v2 GID on Ethernet, none on IB
  uint64_t size = 0;       // -s, bytes (filled with the test's default)
  bool all_sizes = false;  // -a: 2, 4, … 2^23 (UD: up to the MTU)
  uint64_t iters = 0;      // -n, per QP and size (default 1000; write_bw 5000)
  int duration = 0;        // -D, seconds; 0: run -n iterations
  int mtu = 0;             // -m, bytes; 0: the port's active MTU
  int qps = 1;             // -q
  int tx_depth = 0;        // -t, send WRs outstanding per QP
  int rx_depth = 0;        // -r, receives posted per QP (SEND tests)
  int cq_mod = 0;          // -Q, one signaled WR every cq_mod
  bool cq_mod_given = false;
  int post_list = 1;                    // -l, WRs per post call
  int inline_size = 0;                  // -I, bytes sent inline (0: none)
  bool events = false;                  // -e, sleep on completion events instead of polling
  bool bidirectional = false;           // -b
  bool report_gbits = false;            // --report_gbits: Gb/s (10^9 bit) instead of MB/s (2^20 B)
  int out_reads = 0;                    // -o, outstanding READ/atomics; 0: the device's maximum
  bool old_post_send = false;           // --use_old_post_send: ibv_post_send, not ibv_wr_*
  uint16_t tcp_port = kDefaultTcpPort;  // -p
  int qp_timeout = 14;                  // -u, 4.096 us * 2^timeout (IBTA 9.7.6.1.3)
  int sl = 0;                           // -S
  int pkey_index = 0;                   // --pkey_index
  bool dont_xchg_versions = false;      // --dont_xchg_versions
  bool no_peak = false;                 // -N
  bool report_both = false;             // --report-both
  bool print_histogram = false;         // -H: print the latency histogram's buckets
  AtomicOp atomic_op = AtomicOp::kFetchAndAdd;  // -A
  bool warm_up = false;                         // --perform_warm_up
  double limit_bw = 0;                          // -w: fail below this average bandwidth
  double limit_msgrate = 0;                     // -y: fail below this message rate (Mpps)
  std::string server;                           // the positional SERVER; empty: be the server

  // uroce-perf's own.
  int threads = 1;            // --threads: QPs spread over this many polling threads
  bool json = false;          // --json: one JSON document on stdout instead of the table
  std::string json_file;      // --json-file: also write that document here
  std::string plot_file;      // --plot FILE.svg
  bool check = false;         // --check: verify every byte moved (both sides uroce-perf)
  double stall_timeout = 30;  // --stall-timeout: seconds without progress before giving up

  bool is_server() const { return server.empty(); }
  bool latency() const { return kind == Kind::kLatency; }
};

// What parse_options decided: run with the options, or exit with `code` after printing `text`
// (help and version on stdout with code 0; errors on stderr with code 2).
struct ParseResult {
  bool run = false;
  int code = 0;
  std::string text;
  Options options;
};

// argv[0] is the program name, argv[1] the test.
ParseResult parse_options(const std::vector<std::string>& argv);

// The list of tests, for messages: "send_lat, write_lat, …".
std::string test_names();

}  // namespace uroce::perf
