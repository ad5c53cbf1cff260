#include "tools/perf/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "tools/perf/report.h"

namespace uroce::perf {

namespace {

constexpr double kW = 800, kH = 500;
constexpr double kLeft = 90, kRight = 30, kTop = 50, kBottom = 70;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// A short label for an axis value: 0.52, 12.3, 4500, 64K, 8M.
std::string tick_label(double v, bool bytes) {
  char buf[32];
  if (bytes) {
    if (v >= 1048576)
      std::snprintf(buf, sizeof buf, "%gM", v / 1048576);
    else if (v >= 1024)
      std::snprintf(buf, sizeof buf, "%gK", v / 1024);
    else
      std::snprintf(buf, sizeof buf, "%g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

// One axis: maps data values to pixels, linearly or logarithmically.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double p0 = 0, p1 = 1;  // pixel positions of lo and hi

  double map(double v) const {
    double f;
    if (log) {
      v = std::max(v, lo);
      f = (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo));
    } else {
      f = (v - lo) / (hi - lo);
    }
    return p0 + f * (p1 - p0);
  }

  // About five "nice" values inside [lo, hi].
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (log) {
      const double a = std::floor(std::log10(lo)), b = std::ceil(std::log10(hi));
      const bool dense = b - a <= 2;
      for (double e = a; e <= b; ++e)
        for (double m : dense ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
          double v = m * std::pow(10, e);
          if (v >= lo * 0.999 && v <= hi * 1.001) t.push_back(v);
        }
      return t;
    }
    const double range = hi - lo;
    const double raw = range / 5;
    const double mag = std::pow(10, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 5.0, 10.0})
      if (m * mag >= raw) {
        step = m * mag;
        break;
      }
    for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
    return t;
  }
};

// Powers of two for a size axis.
std::vector<double> size_ticks(const Axis& a) {
  std::vector<double> t;
  for (double v = 1; v <= a.hi * 1.001; v *= 2)
    if (v >= a.lo * 0.999) t.push_back(v);
  while (t.size() > 12) {  // every other power when crowded
    std::vector<double> half;
    for (size_t i = 0; i < t.size(); i += 2) half.push_back(t[i]);
    t = half;
  }
  return t;
}

class Svg {
 public:
  explicit Svg(const std::string& title) {
    out_ =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
        "width=\"" +
        num(kW) + "\" height=\"" + num(kH) + "\" viewBox=\"0 0 " + num(kW) + " " + num(kH) +
        "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    out_ += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    text(kW / 2, 24, title, "middle", 15);
  }
  void text(double x, double y, const std::string& s, const char* anchor = "start", int size = 12,
            const char* extra = "") {
    out_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor +
            "\" font-size=\"" + std::to_string(size) + "\" " + extra + ">" + escape(s) +
            "</text>\n";
  }
  void line(double x1, double y1, double x2, double y2, const char* color, double width = 1,
            const char* dash = nullptr) {
    out_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
            num(y2) + "\" stroke=\"" + color + "\" stroke-width=\"" + num(width) + "\"" +
            (dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : "") + "/>\n";
  }
  void rect(double x, double y, double w, double h, const char* color) {
    out_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(w, 0.5)) +
            "\" height=\"" + num(std::max(h, 0.0)) + "\" fill=\"" + color + "\"/>\n";
  }
  void polyline(const std::vector<std::pair<double, double>>& pts, const char* color,
                const char* dash = nullptr) {
    if (pts.empty()) return;
    out_ += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"2\"" +
            (dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : "") + " points=\"";
    for (auto [x, y] : pts) out_ += num(x) + "," + num(y) + " ";
    out_ += "\"/>\n";
    for (auto [x, y] : pts)
      out_ +=
          "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"3\" fill=\"" + color + "\"/>\n";
  }
  void axes(const Axis& x, const Axis& y, const std::vector<double>& xt, bool x_bytes,
            const std::string& xlabel, const std::string& ylabel) {
    line(kLeft, kH - kBottom, kW - kRight, kH - kBottom, "black");
    line(kLeft, kTop, kLeft, kH - kBottom, "black");
    for (double v : xt) {
      double px = x.map(v);
      line(px, kH - kBottom, px, kH - kBottom + 5, "black");
      text(px, kH - kBottom + 18, tick_label(v, x_bytes), "middle");
    }
    for (double v : y.ticks()) {
      double py = y.map(v);
      line(kLeft - 5, py, kLeft, py, "black");
      line(kLeft, py, kW - kRight, py, "#dddddd");
      text(kLeft - 8, py + 4, tick_label(v, false), "end");
    }
    text((kLeft + kW - kRight) / 2, kH - 25, xlabel, "middle");
    text(20, (kTop + kH - kBottom) / 2, ylabel, "middle", 12,
         ("transform=\"rotate(-90 20 " + num((kTop + kH - kBottom) / 2) + ")\"").c_str());
  }
  void legend(const std::vector<std::pair<std::string, const char*>>& items) {
    double y = kTop + 10;
    for (const auto& [name, color] : items) {
      rect(kW - kRight - 150, y - 9, 14, 10, color);
      text(kW - kRight - 130, y, name);
      y += 16;
    }
  }
  std::string done() { return out_ + "</svg>\n"; }

 private:
  std::string out_;
};

Axis x_axis(double lo, double hi, bool log) {
  Axis a;
  a.lo = lo;
  a.hi = hi;
  a.log = log;
  a.p0 = kLeft;
  a.p1 = kW - kRight;
  return a;
}
Axis y_axis(double lo, double hi, bool log) {
  Axis a;
  a.lo = lo;
  a.hi = hi;
  a.log = log;
  a.p0 = kH - kBottom;
  a.p1 = kTop;
  return a;
}

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
