#include "svg.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"

namespace paddock::cli {
namespace {

const char* const kColors[] = {"#2f6f5e", "#d08a2f", "#5b6cc4", "#a4461d", "#8a8fa0"};

std::string Esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

// A round axis top above `v`.
double NiceMax(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

std::string Num(double v) {
  return StrFormat("%.4g", v);
}

std::string Header(int w, int h, const std::string& title) {
  return StrFormat(
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 "
             "%d %d\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"%d\" "
             "height=\"%d\" fill=\"#ffffff\"/>\n",
             w, h, w, h, w, h) +
         StrFormat("<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", 16) +
         Esc(title) + "</text>\n";
}

}  // namespace

std::string SvgLineChart(const std::string& title, const std::string& x_label,
                         const std::vector<std::string>& x, const std::string& left_label,
                         const std::string& right_label, const std::vector<SvgSeries>& series,
                         int mark, const std::string& mark_label) {
  const int w = 720, h = 420, l = 70, r = right_label.empty() ? 30 : 70, t = 50, b = 60;
  const double pw = w - l - r, ph = h - t - b;
  double maxl = 0, maxr = 0;
  for (const auto& s : series)
    for (double v : s.values)
      (s.right_axis ? maxr : maxl) = std::max(s.right_axis ? maxr : maxl, v);
  maxl = NiceMax(maxl);
  maxr = NiceMax(maxr);
  const size_t n = x.size();
  auto px = [&](size_t i) { return l + (n > 1 ? pw * static_cast<double>(i) / (n - 1) : pw / 2); };
  std::string o = Header(w, h, title);
  for (int k = 0; k <= 5; ++k) {
    const double y = t + ph - ph * k / 5;
    o += StrFormat("<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3df\"/>\n", l,
                   y, l + pw, y);
    o += StrFormat("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>\n", l - 6,
                   y + 4, Num(maxl * k / 5).c_str());
    if (!right_label.empty())
      o += StrFormat("<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">%s</text>\n", l + pw + 6, y + 4,
                     Num(maxr * k / 5).c_str());
  }
  for (size_t i = 0; i < n; ++i)
    o += StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">", px(i),
                   t + ph + 18) +
         Esc(x[i]) + "</text>\n";
  o += StrFormat("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", l + pw / 2, h - 18) +
       Esc(x_label) + "</text>\n";
  o += StrFormat("<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\">",
                 t + ph / 2) +
       Esc(left_label) + "</text>\n";
  if (!right_label.empty())
    o += StrFormat("<text transform=\"translate(%d,%.1f) rotate(90)\" text-anchor=\"middle\">",
                   w - 14, t + ph / 2) +
         Esc(right_label) + "</text>\n";
  if (mark >= 0 && static_cast<size_t>(mark) < n) {
    o += StrFormat(
        "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#a4461d\" "
        "stroke-dasharray=\"5,4\"/>\n",
        px(static_cast<size_t>(mark)), t, px(static_cast<size_t>(mark)), t + ph);
    o += StrFormat("<text x=\"%.1f\" y=\"%d\" fill=\"#a4461d\">", px(static_cast<size_t>(mark)) + 4,
                   t + 12) +
         Esc(mark_label) + "</text>\n";
  }
  for (size_t s = 0; s < series.size(); ++s) {
    const char* color = kColors[s % 5];
    const double top = series[s].right_axis ? maxr : maxl;
    std::string pts;
    for (size_t i = 0; i < series[s].values.size() && i < n; ++i)
      pts += StrFormat("%.1f,%.1f ", px(i), t + ph - ph * series[s].values[i] / top);
    o += StrFormat("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" points=\"%s\"/>\n",
                   color, pts.c_str());
    for (size_t i = 0; i < series[s].values.size() && i < n; ++i)
      o += StrFormat("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px(i),
                     t + ph - ph * series[s].values[i] / top, color);
    o += StrFormat("<rect x=\"%.1f\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>", l + 10.0,
                   t + 4 + 18 * static_cast<int>(s), color) +
         StrFormat("<text x=\"%.1f\" y=\"%d\">", l + 28.0, t + 14 + 18 * static_cast<int>(s)) +
         Esc(series[s].name + (series[s].right_axis ? " (right axis)" : "")) + "</text>\n";
  }
  return o + "</svg>\n";
}

std::string SvgBarChart(const std::string& title, const std::vector<std::string>& labels,
                        const std::vector<SvgSeries>& series, const std::string& value_label,
                        double reference) {
  const int l = 170, r = 70, t = 60,
            row = 14 * std::max<int>(1, static_cast<int>(series.size())) + 12;
  const int w = 760, h = t + row * static_cast<int>(labels.size()) + 50;
  const double pw = w - l - r;
  double maxv = reference;
  for (const auto& s : series)
    for (double v : s.values) maxv = std::max(maxv, v);
  maxv = NiceMax(maxv);
  std::string o = Header(w, h, title);
  for (size_t s = 0; s < series.size(); ++s)
    o += StrFormat("<rect x=\"%d\" y=\"32\" width=\"12\" height=\"12\" fill=\"%s\"/>",
                   l + 180 * static_cast<int>(s), kColors[s % 5]) +
         StrFormat("<text x=\"%d\" y=\"42\">", l + 18 + 180 * static_cast<int>(s)) +
         Esc(series[s].name) + "</text>\n";
  for (size_t i = 0; i < labels.size(); ++i) {
    const int y0 = t + row * static_cast<int>(i);
    o += StrFormat("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", l - 8, y0 + row / 2 + 4) +
         Esc(labels[i]) + "</text>\n";
    for (size_t s = 0; s < series.size(); ++s) {
      if (i >= series[s].values.size()) continue;
      const double v = series[s].values[i];
      const int y = y0 + 6 + 14 * static_cast<int>(s);
      o += StrFormat("<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"11\" fill=\"%s\"/>", l, y,
                     pw * std::max(0.0, v) / maxv, kColors[s % 5]);
      o += StrFormat("<text x=\"%.1f\" y=\"%d\" font-size=\"11\">%s</text>\n",
                     l + pw * std::max(0.0, v) / maxv + 4, y + 10, Num(v).c_str());
    }
  }
  const double rx = l + pw * reference / maxv;
  o += StrFormat(
      "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#a4461d\" "
      "stroke-dasharray=\"5,4\"/>\n",
      rx, t - 4, rx, h - 40);
  o += StrFormat("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", l + pw / 2, h - 14) +
       Esc(value_label) + "</text>\n";
  return o + "</svg>\n";
}

}  // namespace paddock::cli
