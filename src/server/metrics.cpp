// server/metrics.cpp: ServiceStats in the Prometheus text format, with vLLM's metric names so
// existing dashboards work (vllm:time_to_first_token_seconds, vllm:kv_cache_usage_perc, ...),
// plus paddock_* figures vLLM has no name for (memory split, HTTP status counts).
#include "server/metrics.h"

#include <cinttypes>
#include <cstdio>

#include "base/strings.h"

namespace paddock::server {
namespace {

void Header(std::string* out, const char* name, const char* type, const char* help) {
  *out += StrFormat("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

namespace {

using Get = double (*)(const ServiceStats&);

// One family: its header once, a sample per loaded model.
void Family(std::string* o, const std::vector<ModelMetrics>& ms, const char* name, const char* type,
            Get get, const char* help) {
  Header(o, name, type, help);
  for (const ModelMetrics& m : ms)
    if (m.loaded)
      *o += StrFormat("%s{model_name=\"%s\"} %.17g\n", name, Escape(m.name).c_str(), get(m.stats));
}

void Hists(std::string* o, const std::vector<ModelMetrics>& ms, const char* name,
           const Histogram ServiceStats::*h, const char* help) {
  Header(o, name, "histogram", help);
  for (const ModelMetrics& m : ms) {
    if (!m.loaded) continue;
    const Histogram& x = m.stats.*h;
    const std::string L = "model_name=\"" + Escape(m.name) + "\"";
    uint64_t acc = 0;
    for (size_t i = 0; i < x.counts.size(); ++i) {
      acc += x.counts[i];
      const std::string le = i < x.bounds.size() ? StrFormat("%g", x.bounds[i]) : "+Inf";
      *o += StrFormat("%s_bucket{%s,le=\"%s\"} %" PRIu64 "\n", name, L.c_str(), le.c_str(), acc);
    }
    *o += StrFormat("%s_sum{%s} %.17g\n", name, L.c_str(), x.sum);
    *o += StrFormat("%s_count{%s} %" PRIu64 "\n", name, L.c_str(), x.count);
  }
}

}  // namespace

namespace {

// The services' figures per model: vLLM's names where vLLM has the metric, paddock_* else.
void ServiceFamilies(std::string& o, const std::vector<ModelMetrics>& ms) {
  // clang-format off
  Family(&o, ms, "vllm:num_requests_running", "gauge", [](const ServiceStats& s) { return double(s.running); }, "Requests in the running batch.");
  Family(&o, ms, "vllm:num_requests_waiting", "gauge", [](const ServiceStats& s) { return double(s.waiting); }, "Requests waiting for admission.");
  Family(&o, ms, "vllm:kv_cache_usage_perc", "gauge", [](const ServiceStats& s) { return s.kv_usage; }, "KV-cache usage (1 = full).");
  Family(&o, ms, "vllm:prompt_tokens_total", "counter", [](const ServiceStats& s) { return double(s.prompt_tokens); }, "Prompt tokens of admitted requests.");
  Family(&o, ms, "vllm:generation_tokens_total", "counter", [](const ServiceStats& s) { return double(s.generation_tokens); }, "Generated tokens.");
  Family(&o, ms, "vllm:prefix_cache_queries_total", "counter", [](const ServiceStats& s) { return double(s.prefix_queries); }, "Prompt tokens looked up in the prefix cache.");
  Family(&o, ms, "vllm:prefix_cache_hits_total", "counter", [](const ServiceStats& s) { return double(s.prefix_hits); }, "Prompt tokens found in the prefix cache.");
  Family(&o, ms, "vllm:num_preemptions_total", "counter", [](const ServiceStats& s) { return double(s.preemptions); }, "Requests preempted (blocks freed, recomputed later).");
  // clang-format on
  Header(&o, "vllm:request_success_total", "counter", "Finished requests by finish reason.");
  const char* reasons[kFinishReasons] = {"length",  "eos",   "stop",
                                         "context", "abort", "timeout"};  // FinishReason order
  for (const ModelMetrics& m : ms) {
    if (!m.loaded) continue;
    for (int i = 0; i < kFinishReasons; ++i)
      o += StrFormat("vllm:request_success_total{model_name=\"%s\",finished_reason=\"%s\"} %" PRIu64
                     "\n",
                     Escape(m.name).c_str(), reasons[i], m.stats.finished[i]);
  }
  Hists(&o, ms, "vllm:time_to_first_token_seconds", &ServiceStats::ttft,
        "Time to first token (from arrival).");
  Hists(&o, ms, "vllm:inter_token_latency_seconds", &ServiceStats::itl,
        "Time between consecutive generated tokens.");
  Hists(&o, ms, "vllm:e2e_request_latency_seconds", &ServiceStats::e2e, "Arrival to finish.");
  Hists(&o, ms, "vllm:request_queue_time_seconds", &ServiceStats::queue_time,
        "Arrival to first admission.");
  Hists(&o, ms, "vllm:request_prompt_tokens", &ServiceStats::prompt_len,
        "Prompt length of finished requests.");
  Hists(&o, ms, "vllm:request_generation_tokens", &ServiceStats::generation_len,
        "Generated length of finished requests.");
  // clang-format off
  Family(&o, ms, "paddock_requests_rejected_total", "counter", [](const ServiceStats& s) { return double(s.rejected); }, "Requests refused because the queue was full (HTTP 429).");
  Family(&o, ms, "paddock_requests_cancelled_total", "counter", [](const ServiceStats& s) { return double(s.cancelled); }, "Requests cancelled (client gone or shutdown).");
  Family(&o, ms, "paddock_requests_timed_out_total", "counter", [](const ServiceStats& s) { return double(s.timeouts); }, "Requests stopped at their deadline.");
  Family(&o, ms, "vllm:spec_decode_num_drafts_total", "counter", [](const ServiceStats& s) { return double(s.spec_drafts); }, "Speculative decoding: verification steps (each checks one request's drafts).");
  Family(&o, ms, "vllm:spec_decode_num_draft_tokens_total", "counter", [](const ServiceStats& s) { return double(s.spec_draft_tokens); }, "Speculative decoding: tokens drafted.");
  Family(&o, ms, "vllm:spec_decode_num_accepted_tokens_total", "counter", [](const ServiceStats& s) { return double(s.spec_accepted_tokens); }, "Speculative decoding: drafted tokens the target accepted.");
  Family(&o, ms, "paddock_grammar_masks_total", "counter", [](const ServiceStats& s) { return double(s.grammar_masks); }, "Constrained decoding: token masks computed (one per constrained token).");
  Family(&o, ms, "paddock_grammar_mask_seconds_total", "counter", [](const ServiceStats& s) { return s.grammar_mask_seconds; }, "Constrained decoding: seconds spent computing token masks.");
  Family(&o, ms, "paddock_forked_choices_total", "counter", [](const ServiceStats& s) { return double(s.forked_choices); }, "Choices of n > 1 requests started by forking their prompt's KV blocks.");
  Family(&o, ms, "paddock_image_tiles_encoded_total", "counter", [](const ServiceStats& s) { return double(s.image_tiles); }, "Image tiles run through the vision encoder (tiles found in its cache excluded).");
  Family(&o, ms, "paddock_image_steps_total", "counter", [](const ServiceStats& s) { return double(s.image_steps); }, "Vision encoder steps run between engine steps.");
  Family(&o, ms, "paddock_engine_steps_total", "counter", [](const ServiceStats& s) { return double(s.steps); }, "Batched forward steps.");
  Family(&o, ms, "paddock_engine_step_tokens_total", "counter", [](const ServiceStats& s) { return double(s.step_tokens); }, "Tokens computed in forward steps (prompt and generated).");
  // clang-format on
}

// What each model holds in memory and what the host did with it (loaded or not).
void ModelFamilies(std::string& o, const std::vector<ModelMetrics>& ms) {
  Header(&o, "paddock_memory_bytes", "gauge",
         "Memory by kind: weights, KV pool, KV in use, scratch.");
  for (const ModelMetrics& m : ms) {
    if (!m.loaded) continue;
    const std::string ML = "model_name=\"" + Escape(m.name) + "\"";
    const MemoryReport& r = m.stats.memory;
    for (const auto& [kind, v] : {std::pair<const char*, uint64_t>{"weights", r.weight_bytes},
                                  {"kv_pool", r.kv_allocated_bytes},
                                  {"kv_used", r.kv_used_bytes},
                                  {"scratch", r.scratch_bytes}})
      o += StrFormat("paddock_memory_bytes{%s,kind=\"%s\"} %" PRIu64 "\n", ML.c_str(), kind, v);
  }
  // A device backend's memory (--device vulkan), for the loaded models that run on one.
  bool on_device = false;
  for (const ModelMetrics& m : ms)
    on_device = on_device || (m.loaded && m.stats.memory.device_total_bytes > 0);
  if (on_device) {
    Header(&o, "paddock_device_memory_bytes", "gauge",
           "A device backend's memory: allocated (weights, KV blocks, activations) and total.");
    for (const ModelMetrics& m : ms) {
      if (!m.loaded || m.stats.memory.device_total_bytes == 0) continue;
      const std::string ML = "model_name=\"" + Escape(m.name) + "\"";
      o += StrFormat("paddock_device_memory_bytes{%s,kind=\"allocated\"} %" PRIu64 "\n", ML.c_str(),
                     m.stats.memory.device_allocated_bytes);
      o += StrFormat("paddock_device_memory_bytes{%s,kind=\"total\"} %" PRIu64 "\n", ML.c_str(),
                     m.stats.memory.device_total_bytes);
    }
  }
  // Whether each loaded model's backend can still step (0: a device lost: every request 503).
  Header(&o, "paddock_backend_up", "gauge",
         "1 while the model's backend can step; 0 once it faulted (a device lost).");
  for (const ModelMetrics& m : ms)
    if (m.loaded)
      o += StrFormat("paddock_backend_up{model_name=\"%s\"} %d\n", Escape(m.name).c_str(),
                     m.faulted ? 0 : 1);
  // The KV disk tier (--kv-disk), for the loaded models that have one.
  auto disk = [&](const char* name, const char* type, const char* help, auto get) {
    bool any = false;
    for (const ModelMetrics& m : ms) any = any || (m.loaded && m.stats.memory.kv_disk);
    if (!any) return;
    Header(&o, name, type, help);
    for (const ModelMetrics& m : ms)
      if (m.loaded && m.stats.memory.kv_disk)
        o += StrFormat("%s{model_name=\"%s\"} %.17g\n", name, Escape(m.name).c_str(),
                       static_cast<double>(get(m.stats.memory)));
  };
  using R = const MemoryReport&;
  // clang-format off
  disk("paddock_kv_disk_hits_total", "counter", "KV blocks read back from the disk tier instead of computed.", [](R r) { return r.kv_disk_hits; });
  disk("paddock_kv_disk_misses_total", "counter", "Prefix lookups past RAM that found no block file.", [](R r) { return r.kv_disk_misses; });
  disk("paddock_kv_disk_read_bytes_total", "counter", "Bytes of block files read back.", [](R r) { return r.kv_disk_bytes_read; });
  disk("paddock_kv_disk_read_seconds_total", "counter", "Seconds spent reading and checking block files.", [](R r) { return r.kv_disk_read_seconds; });
  disk("paddock_kv_disk_blocks_written_total", "counter", "KV blocks saved to the disk tier.", [](R r) { return r.kv_disk_blocks_written; });
  disk("paddock_kv_disk_written_bytes_total", "counter", "Bytes of block files written.", [](R r) { return r.kv_disk_bytes_written; });
  disk("paddock_kv_disk_dropped_writes_total", "counter", "Blocks not saved: the write queue was full or writes stopped.", [](R r) { return r.kv_disk_dropped; });
  disk("paddock_kv_disk_corrupt_total", "counter", "Block files that failed their check (removed, recomputed).", [](R r) { return r.kv_disk_corrupt; });
  disk("paddock_kv_disk_refused_total", "counter", "Entries in the directory that are not regular files (FIFOs, links): refused, never opened.", [](R r) { return r.kv_disk_refused; });
  disk("paddock_kv_disk_write_errors_total", "counter", "Failed block writes (the first stops the writes).", [](R r) { return r.kv_disk_write_errors; });
  disk("paddock_kv_disk_evictions_total", "counter", "Block files removed to keep the byte budget.", [](R r) { return r.kv_disk_evicted; });
  disk("paddock_kv_disk_bytes", "gauge", "Bytes of block files in the directory (as this server counts them).", [](R r) { return r.kv_disk_bytes; });
  disk("paddock_kv_disk_budget_bytes", "gauge", "The disk tier's byte budget.", [](R r) { return r.kv_disk_budget; });
  disk("paddock_kv_disk_writes_stopped", "gauge", "1 when writes stopped (a full disk, an unwritable file).", [](R r) { return r.kv_disk_writes_stopped ? 1 : 0; });
  // clang-format on
  auto each = [&](const char* name, const char* type, const char* help, auto get) {
    Header(&o, name, type, help);
    for (const ModelMetrics& m : ms)
      o += StrFormat("%s{model_name=\"%s\"} %.17g\n", name, Escape(m.name).c_str(),
                     static_cast<double>(get(m)));
  };
  each("paddock_model_loaded", "gauge", "1 while the model is loaded.",
       [](const ModelMetrics& m) { return m.loaded ? 1 : 0; });
  each("paddock_model_footprint_bytes", "gauge",
       "Weights + KV pool + scratch the model holds (loaded) or would hold (an estimate).",
       [](const ModelMetrics& m) { return m.footprint; });
  each("paddock_model_loads_total", "counter", "Loads of the model (the first and reloads).",
       [](const ModelMetrics& m) { return m.host.loads; });
  each("paddock_model_evictions_total", "counter",
       "Unloads to make room for another model (least recently used, idle).",
       [](const ModelMetrics& m) { return m.host.evictions; });
  each("paddock_model_expiries_total", "counter", "Unloads when keep_alive ran out.",
       [](const ModelMetrics& m) { return m.host.expiries; });
  each("paddock_model_load_failures_total", "counter",
       "Loads that failed or were refused (larger than the memory budget).",
       [](const ModelMetrics& m) { return m.host.load_failures; });
  each("paddock_model_load_seconds_total", "counter", "Seconds spent loading the model.",
       [](const ModelMetrics& m) { return m.host.load_seconds_total; });
  each("paddock_model_last_load_seconds", "gauge", "Seconds the model's last load took.",
       [](const ModelMetrics& m) { return m.host.last_load_seconds; });
}

// The server's own: the memory budget, HTTP responses and connections.
void ServerFamilies(std::string& o, const HttpCounters& http, uint64_t budget, uint64_t committed,
                    const std::string& L) {
  const std::string SL = L.empty() ? "" : "{" + L + "}";
  Header(&o, "paddock_memory_budget_bytes", "gauge",
         "The memory budget of all loaded models (weights + KV + scratch).");
  o += StrFormat("paddock_memory_budget_bytes%s %" PRIu64 "\n", SL.c_str(), budget);
  Header(&o, "paddock_memory_committed_bytes", "gauge",
         "Weights + KV + scratch of the loaded (and loading) models.");
  o += StrFormat("paddock_memory_committed_bytes%s %" PRIu64 "\n", SL.c_str(), committed);
  const std::string C = L.empty() ? "" : L + ",";
  Header(&o, "paddock_http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [code, n] : http.by_status)
    o += StrFormat("paddock_http_responses_total{%scode=\"%d\"} %" PRIu64 "\n", C.c_str(), code, n);
  Header(&o, "paddock_http_connections", "gauge", "Open HTTP connections.");
  o += StrFormat("paddock_http_connections%s %" PRIu64 "\n", SL.c_str(), http.connections_open);
  Header(&o, "paddock_http_connections_refused_total", "counter",
         "Connections closed at once because the connection cap was reached.");
  o +=
      StrFormat("paddock_http_connections_refused_total%s %" PRIu64 "\n", SL.c_str(), http.refused);
  Header(&o, "paddock_http_timeouts_total", "counter",
         "Connections closed for a header, body or idle deadline.");
  o += StrFormat("paddock_http_timeouts_total%s %" PRIu64 "\n", SL.c_str(), http.timeouts);
  Header(&o, "paddock_http_oversized_total", "counter",
         "Requests refused or cut for headers or bodies past their limits.");
  o += StrFormat("paddock_http_oversized_total%s %" PRIu64 "\n", SL.c_str(), http.oversized);
}

}  // namespace

std::string PrometheusText(const std::vector<ModelMetrics>& ms, const HttpCounters& http,
                           uint64_t budget, uint64_t committed, const std::string& L) {
  std::string o;
  o.reserve(16384 * (ms.size() + 1));
  ServiceFamilies(o, ms);
  ModelFamilies(o, ms);
  ServerFamilies(o, http, budget, committed, L);
  return o;
}

}  // namespace paddock::server
