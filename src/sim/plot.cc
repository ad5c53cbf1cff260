#include "sim/plot.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tools/svg.h"

namespace uroce::sim {
namespace {

// Distinguishable colours, in order (ColorBrewer's Set1 and Dark2).
constexpr const char* kColors[] = {"#377eb8", "#e41a1c", "#4daf4a", "#984ea3", "#ff7f00",
                                   "#a65628", "#f781bf", "#1b9e77", "#d95f02", "#7570b3",
                                   "#e7298a", "#66a61e", "#e6ab02", "#666666"};
constexpr size_t kNColors = sizeof kColors / sizeof kColors[0];

// The cells of one line. A line may end in CR: CSV's own line break is CRLF (RFC 4180), which
// Python's csv module writes — read as a character of the last cell, it hid the last column of
// bench/sim_experiments.sh's tables from every pattern that named it.
std::vector<std::string> split(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::vector<std::string> out;
  std::string cell;
  std::istringstream s(line);
  while (std::getline(s, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

bool to_double(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && std::isfinite(*v);
}

}  // namespace

std::string plot_csv(const std::string& csv, const PlotSpec& spec, std::string* err) {
  std::istringstream in(csv);
  std::string line;
  if (!std::getline(in, line)) {
    *err = "the CSV is empty";
    return "";
  }
  const std::vector<std::string> head = split(line);
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line))
    if (!line.empty() && line != "\r") rows.push_back(split(line));
  if (rows.empty()) {
    *err = "the CSV has no rows";
    return "";
  }
  auto col = [&](const std::string& name) -> int {
    for (size_t i = 0; i < head.size(); ++i)
      if (head[i] == name) return int(i);
    return -1;
  };
  const int xc = col(spec.x);
  if (xc < 0) {
    *err = "no column '" + spec.x + "'";
    return "";
  }
  // Every column some pattern matches, in the patterns' order; a pattern may match none (f??_x
  // with fewer than ten flows), but together they must match something.
  std::vector<int> yc;
  for (const std::string& pat : spec.y) {
    for (size_t i = 0; i < head.size(); ++i)
      if (int(i) != xc && fnmatch(pat.c_str(), head[i].c_str(), 0) == 0 &&
          std::find(yc.begin(), yc.end(), int(i)) == yc.end())
        yc.push_back(int(i));
  }
  if (yc.empty()) {
    std::string pats;
    for (const std::string& p : spec.y) pats += (pats.empty() ? "'" : ", '") + p + "'";
    *err = "no column matches " + pats;
    return "";
  }
  // The values: y[k][r] for column yc[k], row r.
  std::vector<std::vector<double>> y(yc.size(), std::vector<double>(rows.size()));
  std::vector<double> x(rows.size());
  double lo = spec.y_min, hi = spec.y_min;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    for (size_t k = 0; k < yc.size(); ++k) {
      if (size_t(yc[k]) >= row.size() || !to_double(row[yc[k]], &y[k][r])) {
        *err = "row " + std::to_string(r + 2) + ": '" + head[yc[k]] + "' is not a number";
        return "";
      }
      lo = std::min(lo, y[k][r]);
      hi = std::max(hi, y[k][r]);
    }
    if (!spec.bars) {
      if (size_t(xc) >= row.size() || !to_double(row[xc], &x[r])) {
        *err = "row " + std::to_string(r + 2) + ": '" + spec.x + "' is not a number";
        return "";
      }
      x[r] *= spec.x_scale;
    }
  }
  if (hi <= lo) hi = lo + 1;
  hi += (hi - lo) * 0.08;  // room above the highest value
  tools::Svg svg(spec.title);
  const tools::Axis ya = tools::y_axis(lo, hi, false);
  std::vector<std::pair<std::string, const char*>> legend;
  for (size_t k = 0; k < yc.size(); ++k) legend.emplace_back(head[yc[k]], kColors[k % kNColors]);
  if (spec.bars) {
    const tools::Axis xa = tools::x_axis(0, double(rows.size()), false);
    svg.axes(xa, ya, {}, false, spec.xlabel, spec.ylabel);
    const double group = (xa.p1 - xa.p0) / double(rows.size());
    const double bar = group * 0.8 / double(yc.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      const double g0 = xa.p0 + group * double(r) + group * 0.1;
      for (size_t k = 0; k < yc.size(); ++k) {
        const double top = ya.map(y[k][r]), base = ya.map(std::max(lo, 0.0));
        svg.rect(g0 + bar * double(k), std::min(top, base), bar * 0.9, std::fabs(base - top),
                 kColors[k % kNColors]);
      }
      svg.text(g0 + group * 0.4, tools::kSvgH - tools::kSvgBottom + 16,
               size_t(xc) < rows[r].size() ? rows[r][xc] : "", "middle", 10);
    }
  } else {
    double xlo = *std::min_element(x.begin(), x.end()), xhi = *std::max_element(x.begin(), x.end());
    if (xhi <= xlo) xhi = xlo + 1;
    const tools::Axis xa = tools::x_axis(xlo, xhi, false);
    svg.axes(xa, ya, xa.ticks(), false, spec.xlabel, spec.ylabel);
    for (size_t k = 0; k < yc.size(); ++k) {
      std::vector<std::pair<double, double>> pts;
      for (size_t r = 0; r < rows.size(); ++r) pts.emplace_back(xa.map(x[r]), ya.map(y[k][r]));
      svg.polyline(pts, kColors[k % kNColors], nullptr, rows.size() <= 40);
    }
  }
  if (yc.size() <= 16) svg.legend(legend);
  return svg.done();
}

}  // namespace uroce::sim
