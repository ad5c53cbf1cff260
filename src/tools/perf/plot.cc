#include "tools/perf/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "tools/perf/report.h"
#include "tools/svg.h"

namespace uroce::perf {

namespace {

// The SVG writer is the project's (tools/svg.h); these plots use its canvas.
using tools::Axis;
using tools::size_ticks;
using tools::Svg;
using tools::tick_label;
using tools::x_axis;
using tools::y_axis;
constexpr double kW = tools::kSvgW, kH = tools::kSvgH;
constexpr double kLeft = tools::kSvgLeft, kRight = tools::kSvgRight, kTop = tools::kSvgTop,
                 kBottom = tools::kSvgBottom;

std::string latency_histogram(const Options& o, const SizeResult& r, const std::string& title) {
  const double k = lat_divisor(o) * 1000;  // ns of round trip -> reported usec
  Svg svg(title);
  const double lo = std::max(static_cast<double>(r.hist.min()) / k, 1e-3);
  double hi = static_cast<double>(r.hist.max()) / k;
  if (hi <= lo * 1.05) hi = lo * 1.05 + 1e-3;
  const bool log = hi / lo > 20;
  constexpr int kBins = 60;
  std::vector<uint64_t> bins(kBins, 0);
  Axis x = x_axis(lo, hi, log);
  for (const Histogram::Bucket& b : r.hist.buckets()) {
    double mid = (static_cast<double>(b.lower) + static_cast<double>(b.upper - 1)) / 2 / k;
    double f = (x.map(std::clamp(mid, lo, hi)) - x.p0) / (x.p1 - x.p0);
    bins[static_cast<size_t>(std::clamp(static_cast<int>(f * kBins), 0, kBins - 1))] += b.count;
  }
  const uint64_t top = *std::max_element(bins.begin(), bins.end());
  Axis y = y_axis(0, static_cast<double>(std::max<uint64_t>(top, 1)) * 1.1, false);
  const char* what = lat_divisor(o) == 2 ? "latency [usec], half the round trip" : "latency [usec]";
  svg.axes(x, y, x.ticks(), false, what, "samples");
  const double bw = (x.p1 - x.p0) / kBins;
  for (int i = 0; i < kBins; ++i) {
    if (!bins[static_cast<size_t>(i)]) continue;
    double py = y.map(static_cast<double>(bins[static_cast<size_t>(i)]));
    svg.rect(x.p0 + i * bw + 0.5, py, bw - 1, (kH - kBottom) - py, "#4a7ab5");
  }
  struct Mark {
    const char* name;
    double v;
    const char* color;
  };
  // Each marker's label on its own line, on the side of the line with more room.
  double label_y = kTop + 12;
  for (const Mark& m :
       {Mark{"p50", r.lat.p50 / k, "#2a9d3a"}, Mark{"p99", r.lat.p99 / k, "#e08a00"},
        Mark{"p99.9", r.lat.p999 / k, "#c0392b"}}) {
    double px = x.map(std::clamp(m.v, lo, hi));
    svg.line(px, kTop, px, kH - kBottom, m.color, 1.5, "5,3");
    const bool right_half = px > (x.p0 + x.p1) / 2;
    svg.text(right_half ? px - 4 : px + 4, label_y,
             std::string(m.name) + " " + tick_label(std::round(m.v * 100) / 100, false),
             right_half ? "end" : "start", 11, ("fill=\"" + std::string(m.color) + "\"").c_str());
    label_y += 14;
  }
  return svg.done();
}

std::string latency_by_size(const Options& o, const std::vector<SizeResult>& results,
                            const std::string& title) {
  const double k = lat_divisor(o) * 1000;
  Svg svg(title);
  std::vector<std::pair<uint64_t, const LatSummary*>> pts;
  for (const SizeResult& r : results) {
    const LatSummary* s = r.lat.count ? &r.lat : r.remote_lat.count ? &r.remote_lat : nullptr;
    if (s) pts.emplace_back(r.size, s);
  }
  if (pts.empty()) return svg.done();
  double lo = 1e300, hi = 0;
  for (auto& [size, s] : pts) {
    lo = std::min(lo, s->p50 / k);
    hi = std::max(hi, s->p999 / k);
  }
  lo = std::max(lo * 0.8, 1e-3);
  hi = std::max(hi * 1.25, lo * 2);
  Axis x = x_axis(static_cast<double>(pts.front().first),
                  static_cast<double>(pts.back().first) * 1.0001 + 1, true);
  Axis y = y_axis(lo, hi, true);
  svg.axes(x, y, size_ticks(x), true, "message size [bytes]",
           lat_divisor(o) == 2 ? "latency [usec], half the round trip" : "latency [usec]");
  struct Line {
    const char* name;
    double LatSummary::*field;
    const char* color;
  };
  std::vector<std::pair<std::string, const char*>> legend;
  for (const Line& l :
       {Line{"p50", &LatSummary::p50, "#2a9d3a"}, Line{"p99", &LatSummary::p99, "#e08a00"},
        Line{"p99.9", &LatSummary::p999, "#c0392b"}}) {
    std::vector<std::pair<double, double>> line;
    for (auto& [size, s] : pts)
      line.emplace_back(x.map(static_cast<double>(size)), y.map(std::max(s->*l.field / k, lo)));
    svg.polyline(line, l.color);
    legend.emplace_back(l.name, l.color);
  }
  svg.legend(legend);
  return svg.done();
}

std::string bandwidth_plot(const Options& o, const std::vector<SizeResult>& results,
                           const std::string& title) {
  auto units = [&](double bps) { return o.report_gbits ? bps * 8 / 1e9 : bps / 1048576.0; };
  const std::string ylabel = o.report_gbits ? "bandwidth [Gb/sec]" : "bandwidth [MB/sec]";
  Svg svg(title);
  // The figures the table printed: what this side sent, else received, else the peer's.
  struct Pt {
    uint64_t size;
    double avg, peak;
  };
  std::vector<Pt> pts;
  for (const SizeResult& r : results) {
    const BwSummary* s = r.tx.msgs          ? &r.tx
                         : r.rx.msgs        ? &r.rx
                         : r.remote_tx.msgs ? &r.remote_tx
                                            : nullptr;
    if (s) pts.push_back({r.size, units(s->avg), o.no_peak ? 0 : units(s->peak)});
  }
  if (pts.empty()) return svg.done();
  double hi = 0;
  for (const Pt& p : pts) hi = std::max({hi, p.avg, p.peak});
  Axis y = y_axis(0, std::max(hi * 1.15, 1e-6), false);
  if (pts.size() == 1) {
    Axis x = x_axis(0, 1, false);
    svg.axes(x, y, {}, false, std::to_string(pts[0].size) + "-byte messages", ylabel);
    const double w = 120, cx = (kLeft + kW - kRight) / 2;
    svg.rect(cx - w - 10, y.map(pts[0].avg), w, (kH - kBottom) - y.map(pts[0].avg), "#4a7ab5");
    svg.text(cx - 10 - w / 2, y.map(pts[0].avg) - 6,
             "average " + tick_label(std::round(pts[0].avg * 100) / 100, false), "middle");
    if (!o.no_peak) {
      svg.rect(cx + 10, y.map(pts[0].peak), w, (kH - kBottom) - y.map(pts[0].peak), "#9bbbe0");
      svg.text(cx + 10 + w / 2, y.map(pts[0].peak) - 6,
               "peak " + tick_label(std::round(pts[0].peak * 100) / 100, false), "middle");
    }
    return svg.done();
  }
  Axis x =
      x_axis(static_cast<double>(pts.front().size), static_cast<double>(pts.back().size), true);
  svg.axes(x, y, size_ticks(x), true, "message size [bytes]", ylabel);
  std::vector<std::pair<double, double>> avg, peak;
  for (const Pt& p : pts) {
    avg.emplace_back(x.map(static_cast<double>(p.size)), y.map(p.avg));
    peak.emplace_back(x.map(static_cast<double>(p.size)), y.map(p.peak));
  }
  if (!o.no_peak) svg.polyline(peak, "#9bbbe0", "5,3");
  svg.polyline(avg, "#4a7ab5");
  std::vector<std::pair<std::string, const char*>> legend{{"average", "#4a7ab5"}};
  if (!o.no_peak) legend.emplace_back("peak", "#9bbbe0");
  svg.legend(legend);
  return svg.done();
}

}  // namespace

std::string plot_svg(const Options& o, const std::vector<SizeResult>& results,
                     const std::string& title) {
  if (!o.latency()) return bandwidth_plot(o, results, title);
  if (results.size() == 1 && results[0].hist.count())
    return latency_histogram(o, results[0], title);
  return latency_by_size(o, results, title);
}

bool write_plot(const Options& o, const std::vector<SizeResult>& results, const std::string& title,
                std::string* err) {
  std::ofstream f(o.plot_file, std::ios::trunc);
  if (!f) {
    *err = "cannot write " + o.plot_file;
    return false;
  }
  f << plot_svg(o, results, title);
  f.close();
  if (!f) {
    *err = "writing " + o.plot_file + " failed";
    return false;
  }
  return true;
}

}  // namespace uroce::perf
