// The per-QP views of the `uroce` command (src/tools/uroce.cc), read from the QP tables devices
// publish (engine/stats_shm.h):
//   uroce stats --qp [-w N] [--json]   every QP of every process: identity, peer, counters, rates
//   uroce top [--once] [--sort …]      a live per-process, per-QP view, one line per QP, refreshed
//                                      every interval, sorted by traffic or by errors
// What the counters mean, and the rxe/mlx5 counter each corresponds to: docs/troubleshooting.md,
// "Per QP: uroce stats --qp and uroce top".
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/stats_shm.h"

namespace uroce::tools {

// The live published devices (path, snapshot) that match the command's filters.
using Published = std::vector<std::pair<std::string, stats_shm::Snapshot>>;
using Collect = std::function<Published()>;

struct QpStatsOptions {
  bool all = false;   // every counter, also those that are zero (human output)
  bool json = false;  // one JSON document per refresh
  double watch = 0;   // seconds between refreshes; 0: once
  int count = 0;      // refreshes with watch; 0: until interrupted
};
int cmd_stats_qp(const QpStatsOptions& o, const Collect& collect);

enum class TopSort { kTraffic, kErrors };
struct TopOptions {
  double interval = 1;  // seconds between frames
  bool once = false;    // one frame, no terminal control: for scripts and tests
  int count = 0;        // frames; 0: until `q`
  TopSort sort = TopSort::kTraffic;
};
int cmd_top(const TopOptions& o, const Collect& collect);

// The sort keys of `uroce top`, for tests: error events (the counters of kind kError summed) and
// traffic (bytes both ways).
uint64_t qp_errors(const transport::QpCounters& c);
uint64_t qp_traffic_bytes(const transport::QpCounters& c);

}  // namespace uroce::tools
