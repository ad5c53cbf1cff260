// uroce-perf: perftest's latency and bandwidth tests (send/write/read/atomic × lat/bw) over any
// verbs device, speaking perftest's set-up protocol, with more in the report. See
// docs/uroce-perf.md; the flow of a run is in session.cc.
#include <cstdio>
#include <string>
#include <vector>

#include "tools/perf/options.h"
#include "tools/perf/session.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  uroce::perf::ParseResult p = uroce::perf::parse_options(args);
  if (!p.run) {
    std::fputs(p.text.c_str(), p.code ? stderr : stdout);
    return p.code;
  }
  return uroce::perf::run_session(p.options);
}
