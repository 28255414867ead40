// base/stats.h: the summary every benchmark reports of repeated measurements.
#pragma once

#include <algorithm>
#include <vector>

namespace paddock {

struct Stats {
  double median = 0, min = 0, max = 0;
};

// v must not be empty; the median of an even count is the upper of the two middle values.
inline Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace paddock
