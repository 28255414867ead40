// tools/paddock/svg.h: small self-contained SVG charts for the measurement commands (bench
// --sweep-batch, ablate): no library, text escaped, opens in any browser.
#pragma once

#include <string>
#include <vector>

namespace paddock::cli {

struct SvgSeries {
  std::string name;
  std::vector<double> values;
  bool right_axis = false;  // line charts: scaled on the right-hand axis
};

// Lines over categories x (evenly spaced), a left and an optional right axis; `mark`: the index
// of a category to mark with a vertical line and `mark_label` (-1: none).
std::string SvgLineChart(const std::string& title, const std::string& x_label,
                         const std::vector<std::string>& x, const std::string& left_label,
                         const std::string& right_label, const std::vector<SvgSeries>& series,
                         int mark = -1, const std::string& mark_label = "");

// Horizontal bars: one row per label, one bar per series in each row, a reference line at
// `reference` (e.g. 1.0 for factors).
std::string SvgBarChart(const std::string& title, const std::vector<std::string>& labels,
                        const std::vector<SvgSeries>& series, const std::string& value_label,
                        double reference);

}  // namespace paddock::cli
