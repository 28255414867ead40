// engine/histogram.cpp: fixed-bucket latency and length histograms (paddock/service.h).
#include <cmath>

#include "paddock/service.h"

namespace paddock {

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  counts[i]++;
  sum += v;
  count++;
}

double Histogram::Quantile(double q) const {
  if (count == 0) return 0;
  const double want = q * static_cast<double>(count);
  uint64_t acc = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    acc += counts[i];
    if (static_cast<double>(acc) >= want) return i < bounds.size() ? bounds[i] : INFINITY;
  }
  return INFINITY;
}

}  // namespace paddock
