// One uroce-perf run from start to end: the set-up exchange in the order perftest's program of
// the same test runs it, the runs (one per message size) on the polling threads, and the
// reports. Returns the process's exit status.
#pragma once

#include "tools/perf/options.h"

namespace uroce::perf {

int run_session(const Options& o);

}  // namespace uroce::perf
