// --plot FILE.svg: a self-contained SVG (no scripts, no external fonts or styles) drawn by
// uroce-perf itself.
//   latency test, one size: the histogram of the reported latency (log-spaced bins between the
//     smallest and largest sample) with the median, p99 and p99.9 marked;
//   latency test, -a: median, p99 and p99.9 against message size (log-log);
//   bandwidth test: average (and peak) bandwidth against message size (log x), or one bar for
//     a single size.
#pragma once

#include <string>
#include <vector>

#include "tools/perf/options.h"
#include "tools/perf/results.h"

namespace uroce::perf {

// The SVG document for the run; `title` goes on top.
std::string plot_svg(const Options& o, const std::vector<SizeResult>& results,
                     const std::string& title);

// Writes it to o.plot_file; false and *err on failure.
bool write_plot(const Options& o, const std::vector<SizeResult>& results, const std::string& title,
                std::string* err);

}  // namespace uroce::perf
