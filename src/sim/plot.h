// `uroce-sim plot`: SVG plots of the simulator's CSV files, drawn with the project's SVG writer
// (tools/svg.h) — a time series (a numeric x column, one line per y column) or grouped bars (x
// as labels, one bar per y column in each group), for docs/congestion-control.md's figures.
#pragma once

#include <string>
#include <vector>

namespace uroce::sim {

struct PlotSpec {
  std::string title, xlabel, ylabel;
  std::string x;               // the x column
  std::vector<std::string> y;  // y columns; a '*' matches any text ("*_gbps")
  bool bars = false;
  double x_scale = 1;  // multiplies x (line plots): 0.001 turns µs into ms
  double y_min = 0;    // the y axis starts here (line plots: unless data goes lower)
};

// The SVG for the CSV text `csv`, or "" and *err (an unknown column, no rows, a non-number).
std::string plot_csv(const std::string& csv, const PlotSpec& spec, std::string* err);

}  // namespace uroce::sim
