#include "tools/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace uroce::tools {
namespace {

constexpr double kW = kSvgW, kH = kSvgH;
constexpr double kLeft = kSvgLeft, kRight = kSvgRight, kTop = kSvgTop, kBottom = kSvgBottom;

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

}  // namespace

std::string svg_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

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

double Axis::map(double v) const {
  double f;
  if (log) {
    v = std::max(v, lo);
    f = (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo));
  } else {
    f = (v - lo) / (hi - lo);
  }
  return p0 + f * (p1 - p0);
}

std::vector<double> Axis::ticks() const {
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

Axis x_axis(double lo, double hi, bool log) {
  return Axis{.lo = lo, .hi = hi, .log = log, .p0 = kLeft, .p1 = kW - kRight};
}

Axis y_axis(double lo, double hi, bool log) {  // upwards: lo at the bottom
  return Axis{.lo = lo, .hi = hi, .log = log, .p0 = kH - kBottom, .p1 = kTop};
}

Svg::Svg(const std::string& title) {
  out_ =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"" +
      svg_num(kW) + "\" height=\"" + svg_num(kH) + "\" viewBox=\"0 0 " + svg_num(kW) + " " +
      svg_num(kH) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out_ += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  text(kW / 2, 24, title, "middle", 15);
}

void Svg::text(double x, double y, const std::string& s, const char* anchor, int size,
               const char* extra) {
  out_ += "<text x=\"" + svg_num(x) + "\" y=\"" + svg_num(y) + "\" text-anchor=\"" + anchor +
          "\" font-size=\"" + std::to_string(size) + "\" " + extra + ">" + escape(s) + "</text>\n";
}

void Svg::line(double x1, double y1, double x2, double y2, const char* color, double width,
               const char* dash) {
  out_ += "<line x1=\"" + svg_num(x1) + "\" y1=\"" + svg_num(y1) + "\" x2=\"" + svg_num(x2) +
          "\" y2=\"" + svg_num(y2) + "\" stroke=\"" + color + "\" stroke-width=\"" +
          svg_num(width) + "\"" + (dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : "") +
          "/>\n";
}

void Svg::rect(double x, double y, double w, double h, const char* color) {
  out_ += "<rect x=\"" + svg_num(x) + "\" y=\"" + svg_num(y) + "\" width=\"" +
          svg_num(std::max(w, 0.5)) + "\" height=\"" + svg_num(std::max(h, 0.0)) + "\" fill=\"" +
          color + "\"/>\n";
}

void Svg::polyline(const std::vector<std::pair<double, double>>& pts, const char* color,
                   const char* dash, bool markers) {
  if (pts.empty()) return;
  out_ += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"2\"" +
          (dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : "") + " points=\"";
  for (auto [x, y] : pts) out_ += svg_num(x) + "," + svg_num(y) + " ";
  out_ += "\"/>\n";
  if (!markers) return;
  for (auto [x, y] : pts)
    out_ += "<circle cx=\"" + svg_num(x) + "\" cy=\"" + svg_num(y) + "\" r=\"3\" fill=\"" + color +
            "\"/>\n";
}

void Svg::axes(const Axis& x, const Axis& y, const std::vector<double>& xt, bool x_bytes,
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
       ("transform=\"rotate(-90 20 " + svg_num((kTop + kH - kBottom) / 2) + ")\"").c_str());
}

void Svg::legend(const std::vector<std::pair<std::string, const char*>>& items) {
  double y = kTop + 10;
  for (const auto& [name, color] : items) {
    rect(kW - kRight - 150, y - 9, 14, 10, color);
    text(kW - kRight - 130, y, name);
    y += 16;
  }
}

std::string Svg::done() {
  return out_ + "</svg>\n";
}

}  // namespace uroce::tools
