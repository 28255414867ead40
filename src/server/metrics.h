// server/metrics.h: the /metrics page.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "paddock/service.h"

namespace paddock::server {

struct HttpCounters {
  std::map<int, uint64_t> by_status;
};

std::string PrometheusText(const std::string& model_name, const ServiceStats& stats,
                           const HttpCounters& http);

}  // namespace paddock::server
