// server/metrics.h: the /metrics page.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "paddock/service.h"

namespace paddock::server {

struct HttpCounters {
  std::map<int, uint64_t> by_status;
  uint64_t connections_open = 0;
  uint64_t refused = 0;    // connections closed at once over the cap
  uint64_t timeouts = 0;   // header, body or idle deadline reached
  uint64_t oversized = 0;  // bodies or headers past their limits
};

std::string PrometheusText(const std::string& model_name, const ServiceStats& stats,
                           const HttpCounters& http);

}  // namespace paddock::server
