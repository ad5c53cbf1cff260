// The project's own SVG writer: a self-contained document (no scripts, no external fonts or
// styles) with axes, ticks, lines, bars and a legend, on an 800 × 500 canvas. Used by
// uroce-perf's --plot (tools/perf/plot.cc) and uroce-sim's plots (sim/plot.cc).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace uroce::tools {

// The canvas and the plot area's margins, pixels.
inline constexpr double kSvgW = 800, kSvgH = 500;
inline constexpr double kSvgLeft = 90, kSvgRight = 30, kSvgTop = 50, kSvgBottom = 70;

// One decimal, for coordinates.
std::string svg_num(double v);
// A short label for an axis value: 0.52, 12.3, 4500, or with `bytes` 64K, 8M.
std::string tick_label(double v, bool bytes);

// One axis: maps data values to pixels, linearly or logarithmically.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double p0 = 0, p1 = 1;  // pixel positions of lo and hi

  double map(double v) const;
  // About five "nice" values inside [lo, hi].
  std::vector<double> ticks() const;
};
// Powers of two inside a size axis (every other one when crowded).
std::vector<double> size_ticks(const Axis& a);
// The horizontal and vertical axes of the plot area.
Axis x_axis(double lo, double hi, bool log);
Axis y_axis(double lo, double hi, bool log);

class Svg {
 public:
  explicit Svg(const std::string& title);
  void text(double x, double y, const std::string& s, const char* anchor = "start", int size = 12,
            const char* extra = "");
  void line(double x1, double y1, double x2, double y2, const char* color, double width = 1,
            const char* dash = nullptr);
  void rect(double x, double y, double w, double h, const char* color);
  // A line through the points; `markers` draws a dot at each (for a few points, not a series).
  void polyline(const std::vector<std::pair<double, double>>& pts, const char* color,
                const char* dash = nullptr, bool markers = true);
  // Both axes with their ticks (x at `xt`, y at its own), grid lines and labels.
  void axes(const Axis& x, const Axis& y, const std::vector<double>& xt, bool x_bytes,
            const std::string& xlabel, const std::string& ylabel);
  void legend(const std::vector<std::pair<std::string, const char*>>& items);
  std::string done();

 private:
  std::string out_;
};

}  // namespace uroce::tools
