// The inside of one uroce-perf run (session.h): the Session class, whose set-up, sequences and
// totals are session.cc (its header: the order of everything on the TCP connection) and whose
// runs — one message size on the polling threads, its verification and results — are
// session_run.cc; and the Fields helpers both use. Internal to uroce-perf.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tools/perf/counters.h"
#include "tools/perf/datapath.h"
#include "tools/perf/options.h"
#include "tools/perf/report.h"
#include "tools/perf/resources.h"
#include "tools/perf/setup.h"

namespace uroce::perf::session_detail {

// The tests' families: each runs its own sequence of exchanges (session.cc's header).

enum class Family { kRdmaBw, kSendBw, kSendLat, kWriteLat, kRdmaLat };

Family family_of(const Options& o);

// Fields' values: numbers as text and back (a missing key reads as 0 or ""); one line each.
std::string num(double v);
double to_double(const Fields& f, const std::string& k);
uint64_t to_u64(const Fields& f, const std::string& k);
std::string to_str(const Fields& f, const std::string& k);
// Values in Fields hold no newline.
std::string one_line(std::string s);

class Session {
 public:
  explicit Session(const Options& o)
      : o_(o), res_(o), fam_(family_of(o)), client_(!o.is_server()) {}

  int run();

 private:
  // ---- set-up ------------------------------------------------------------------------------

  void refuse_what_perftest_cannot_do();

  // P: both sides must run the same test, or the handshake counts and buffers disagree.
  void exchange_parameters();

  void choose_sizes();

  void prepare_buffers();

  Dest k0() { return ch_->handshake(res_.qp(0).local, res_.uses_gid()); }

  void connect_qps();

  // ---- one run -----------------------------------------------------------------------------

  bool target_side() const { return !client_ || o_.bidirectional; }

  SizeResult run_size(uint64_t size);

  // This side's figures from its workers.
  void collect(SizeResult& r, const std::vector<WorkerResult>& wr, const RunSpec& s);

  void check_failure(SizeResult& r, const std::string& why);

  // --check after a run: what landed in this side's memory. Clears what it verified, so that
  // the next size must deliver it anew.
  void verify(SizeResult& r, const std::vector<WorkerResult>& wr, const RunSpec& spec,
              const std::vector<uint64_t>& peer_sent);

  void verify_region(SizeResult& r, const uint8_t* p, uint64_t n, bool client_data, int qp,
                     const std::string& what);

  // UC: the sender's completion says the data left, not that it landed; give it until the
  // stall timeout to arrive before judging.
  void await_region(const uint8_t* p, uint64_t n, bool client_data, int qp);

  // ---- the tests' sequences ----------------------------------------------------------------

  void print_size(const SizeResult& r, const BwSummary& local);

  // A bidirectional size: exchange perftest's reports and print the sum of both sides.
  void print_bidir(SizeResult& r, const BwSummary& local);

  void rdma_bw();

  void send_bw();

  void print_lat(const SizeResult& r, const LatSummary& s);

  void send_lat();

  void write_lat();

  void rdma_lat();

  // ---- totals ------------------------------------------------------------------------------

  // For a failed run: what uroce counted that tells why (drops, errors, retransmissions), or "".
  std::string counters_hint();

  void end_run();

  // T: CPU time and counters of both sides.
  void exchange_totals();

  int finish();

  const Options& o_;
  Resources res_;
  const Family fam_;
  const bool client_;
  std::unique_ptr<Channel> ch_;
  bool ext_ = false;
  uint32_t cycle_ = 4096, line_ = 64;
  ibv_mtu mtu_ = IBV_MTU_1024;
  std::vector<uint64_t> sizes_;
  ReportContext ctx_;
  std::vector<SizeResult> results_;
  RunTotals totals_;
  CpuSample cpu0_;
  CounterSnapshot ctr0_;
};

}  // namespace uroce::perf::session_detail
