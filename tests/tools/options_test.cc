// uroce-perf's command line (src/tools/perf/options.h): perftest's defaults and dependent
// defaults, and a clear message, never a crash or a silent default, for every bad flag.
#include "tools/perf/options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace uroce::perf {
namespace {

ParseResult parse(std::vector<std::string> args) {
  args.insert(args.begin(), "uroce-perf");
  return parse_options(args);
}

Options ok(std::vector<std::string> args) {
  ParseResult r = parse(args);
  EXPECT_TRUE(r.run) << r.text;
  return r.options;
}

// Parsing fails with exit status 2 and a message containing `want`.
void fails(std::vector<std::string> args, const std::string& want) {
  ParseResult r = parse(args);
  EXPECT_FALSE(r.run);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.text.find(want), std::string::npos) << "message: " << r.text;
  EXPECT_NE(r.text.find("uroce-perf"), std::string::npos) << "says who is talking: " << r.text;
}

TEST(OptionsTest, PerftestsDefaults) {
  Options lat = ok({"send_lat"});
  EXPECT_EQ(lat.verb, Verb::kSend);
  EXPECT_EQ(lat.kind, Kind::kLatency);
  EXPECT_EQ(lat.size, 2u);
  EXPECT_EQ(lat.iters, 1000u);
  EXPECT_EQ(lat.tx_depth, 1);
  EXPECT_EQ(lat.rx_depth, 512);
  EXPECT_EQ(lat.conn, Conn::kRC);
  EXPECT_EQ(lat.tcp_port, 18515);
  EXPECT_TRUE(lat.is_server());

  Options wbw = ok({"write_bw", "10.0.0.1"});
  EXPECT_EQ(wbw.size, 65536u);
  EXPECT_EQ(wbw.iters, 5000u);  // write_bw alone defaults to 5000
  EXPECT_EQ(wbw.tx_depth, 128);
  EXPECT_EQ(wbw.cq_mod, 1);  // messages above 8 KiB: one CQE per WR
  EXPECT_EQ(wbw.server, "10.0.0.1");
  EXPECT_FALSE(wbw.is_server());

  Options small = ok({"send_bw", "-s", "64"});
  EXPECT_EQ(small.iters, 1000u);
  EXPECT_EQ(small.cq_mod, 100);
  EXPECT_EQ(ok({"atomic_bw"}).size, 8u);
  EXPECT_EQ(ok({"read_lat"}).size, 2u);
}

TEST(OptionsTest, DependentDefaultsFollowPerftest) {
  Options o = ok({"send_bw", "-n", "50", "-s", "64"});
  EXPECT_EQ(o.tx_depth, 50);  // never more in flight than there are iterations
  EXPECT_EQ(o.rx_depth, 50);
  EXPECT_EQ(o.cq_mod, 50);  // and never a CQE rarer than the send queue allows
  EXPECT_EQ(ok({"write_bw", "-Q", "16"}).cq_mod, 16);  // an explicit -Q wins
  EXPECT_EQ(ok({"write_bw", "-a"}).cq_mod, 100);       // -a keeps moderation
  Options a = ok({"write_bw", "-a"});
  EXPECT_TRUE(a.all_sizes);
  EXPECT_EQ(a.size, kMaxAllSize);                         // buffers sized for the largest
  EXPECT_EQ(ok({"read_bw", "-I", "64"}).inline_size, 0);  // nothing to inline for READ
  Options d = ok({"write_bw", "-D", "3"});
  EXPECT_EQ(d.duration, 3);
  EXPECT_EQ(d.iters, 0u);
}

TEST(OptionsTest, PerftestSpellingsAllWork) {
  EXPECT_EQ(ok({"send_lat", "-s64"}).size, 64u);
  EXPECT_EQ(ok({"send_lat", "--size=4K"}).size, 4096u);
  EXPECT_EQ(ok({"send_lat", "--size", "1M"}).size, 1048576u);
  Options o = ok({"write_bw", "-ab",  "--report_gbits",
                  "-c",       "UC",   "-d",
                  "mlx5_0",   "-x",   "3",
                  "-i",       "2",    "-q",
                  "4",        "-t",   "64",
                  "-m",       "1024", "-F",
                  "-p",       "9999", "host"});
  EXPECT_TRUE(o.all_sizes);
  EXPECT_TRUE(o.bidirectional);
  EXPECT_TRUE(o.report_gbits);
  EXPECT_EQ(o.conn, Conn::kUC);
  EXPECT_EQ(o.device, "mlx5_0");
  EXPECT_EQ(o.gid_index, 3);
  EXPECT_EQ(o.ib_port, 2);
  EXPECT_EQ(o.qps, 4);
  EXPECT_EQ(o.tx_depth, 64);
  EXPECT_EQ(o.mtu, 1024);
  EXPECT_EQ(o.tcp_port, 9999);
  EXPECT_EQ(o.server, "host");
  EXPECT_EQ(ok({"ib_read_bw"}).test, "read_bw");  // perftest's program names work too
  EXPECT_EQ(ok({"atomic_lat", "-A", "CMP_AND_SWAP"}).atomic_op, AtomicOp::kCmpAndSwap);
  EXPECT_TRUE(ok({"send_bw", "--use_old_post_send"}).old_post_send);
}

TEST(OptionsTest, UroceperfsOwnOptions) {
  Options o = ok({"send_lat", "--json", "--json-file", "/tmp/x.json", "--plot", "p.svg", "--check",
                  "--stall-timeout", "5", "-q", "4", "--threads", "2"});
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.json_file, "/tmp/x.json");
  EXPECT_EQ(o.plot_file, "p.svg");
  EXPECT_TRUE(o.check);
  EXPECT_EQ(o.stall_timeout, 5);
  EXPECT_EQ(o.threads, 2);
}

TEST(OptionsTest, HelpAndVersionExitZero) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"--help"}, {"write_bw", "--help"}, {"--version"}, {"-h"}}) {
    ParseResult r = parse(args);
    EXPECT_FALSE(r.run);
    EXPECT_EQ(r.code, 0);
    EXPECT_FALSE(r.text.empty());
  }
  EXPECT_NE(parse({"write_bw", "--help"}).text.find("--tx-depth"), std::string::npos);
  EXPECT_NE(parse({"--version"}).text.find("6.06"), std::string::npos);
}

TEST(OptionsTest, BadTestsAndValuesSayWhatIsWrong) {
  fails({}, "no test given");
  fails({"write_latency"}, "unknown test 'write_latency'");
  fails({"write_latency"}, "send_lat, write_lat");  // and lists the tests
  fails({"send_lat", "-n", "3"}, "--iters");
  fails({"send_lat", "-n", "many"}, "--iters");
  fails({"send_lat", "-s", "0"}, "--size");
  fails({"send_lat", "-s", "3G"}, "--size");
  fails({"send_lat", "-s", "12Q"}, "--size");
  fails({"send_lat", "-m", "1500"}, "--mtu");
  fails({"send_lat", "-c", "RD"}, "unknown connection type 'RD'");
  fails({"send_lat", "-c", "XRC"}, "-c XRC is not supported");
  fails({"send_lat", "--no-such-flag"}, "--no-such-flag");
  fails({"send_lat", "a", "b"}, "b");  // one server only
  fails({"atomic_lat", "-A", "SWAP"}, "unknown atomic type 'SWAP'");
  fails({"send_bw", "-t", "0"}, "--tx-depth");
  fails({"send_bw", "-q", "0"}, "--qp");
}

TEST(OptionsTest, OperationsTheTransportCannotCarryAreRefused) {
  fails({"read_bw", "-c", "UC"}, "RDMA READ needs a reliable connection");
  fails({"read_lat", "-c", "UD"}, "RDMA READ needs a reliable connection");
  fails({"atomic_bw", "-c", "UD"}, "atomics need a reliable connection");
  fails({"write_lat", "-c", "UD"}, "RDMA WRITE needs a connection");
  fails({"atomic_bw", "-s", "16"}, "atomics are 8 bytes");
  fails({"atomic_lat", "-a"}, "atomics have one size");
}

TEST(OptionsTest, ContradictionsAreRefused) {
  fails({"write_bw", "-D", "2", "-n", "100"}, "-D and -n exclude each other");
  fails({"write_bw", "-D", "2", "-a"}, "-D and -a exclude each other");
  fails({"send_lat", "-b"}, "-b applies to bandwidth tests");
  fails({"write_lat", "-e"}, "-e does not apply to write_lat");
  fails({"send_bw", "-A", "CMP_AND_SWAP"}, "-A applies to the atomic tests");
  fails({"write_bw", "-r", "64"}, "-r applies to the SEND tests");
  fails({"send_bw", "-o", "4"}, "-o applies to the READ and atomic tests");
  fails({"write_bw", "--threads", "4"}, "--threads 4 needs at least as many QPs (-q 4)");
  fails({"write_bw", "--check", "--dont_xchg_versions"}, "--check needs the version exchange");
}

TEST(OptionsTest, PerftestOptionsNotImplementedAreNamedWithTheReason) {
  fails({"send_lat", "-R"}, "--rdma_cm (-R) is not supported: connecting through rdma_cm");
  fails({"write_bw", "--use-srq"}, "--use-srq is not supported");
  fails({"send_lat", "-C"}, "CLOCK_MONOTONIC");
  fails({"send_lat", "-T", "32"}, "--tos (-T) is not supported");
  fails({"write_bw", "--rate_limit=5"}, "rate limiting is not implemented");
  fails({"write_bw", "--out_json"}, "use --json");
}

}  // namespace
}  // namespace uroce::perf
