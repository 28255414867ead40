// server/metrics.h: the /metrics page.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "paddock/service.h"

namespace paddock::server {

struct HttpCounters {
  std::map<int, uint64_t> by_status;
  uint64_t connections_open = 0;
  uint64_t refused = 0;    // connections closed at once over the cap
  uint64_t timeouts = 0;   // header, body or idle deadline reached
  uint64_t oversized = 0;  // bodies or headers past their limits
};

// What the model host (server/model_host.h) did with one model.
struct ModelCounters {
  uint64_t loads = 0, evictions = 0, expiries = 0, load_failures = 0;
  double load_seconds_total = 0, last_load_seconds = 0;
};

// One served model: its service's figures while loaded, and what the host did with it.
struct ModelMetrics {
  std::string name;
  bool loaded = false;
  ServiceStats stats;      // (loaded only)
  uint64_t footprint = 0;  // bytes it holds (loaded) or would (estimate)
  ModelCounters host;
  bool faulted = false;  // (loaded only) its backend can no longer step (a device lost)
};

// Every model's series carry model_name; the server-wide ones (HTTP, the memory budget) carry
// server_labels (e.g. model_name="x" with one model, or nothing).
std::string PrometheusText(const std::vector<ModelMetrics>& models, const HttpCounters& http,
                           uint64_t budget, uint64_t committed, const std::string& server_labels);

}  // namespace paddock::server
