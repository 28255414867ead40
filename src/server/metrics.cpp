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

void Gauge(std::string* out, const char* name, const std::string& labels, double v,
           const char* help) {
  Header(out, name, "gauge", help);
  *out += StrFormat("%s{%s} %.17g\n", name, labels.c_str(), v);
}

void Counter(std::string* out, const char* name, const std::string& labels, uint64_t v,
             const char* help) {
  Header(out, name, "counter", help);
  *out += StrFormat("%s{%s} %" PRIu64 "\n", name, labels.c_str(), v);
}

void CounterSeconds(std::string* out, const char* name, const std::string& labels, double v,
                    const char* help) {
  Header(out, name, "counter", help);
  *out += StrFormat("%s{%s} %.17g\n", name, labels.c_str(), v);
}

void Hist(std::string* out, const char* name, const std::string& labels, const Histogram& h,
          const char* help) {
  Header(out, name, "histogram", help);
  uint64_t acc = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    acc += h.counts[i];
    const std::string le = i < h.bounds.size() ? StrFormat("%g", h.bounds[i]) : "+Inf";
    *out +=
        StrFormat("%s_bucket{%s,le=\"%s\"} %" PRIu64 "\n", name, labels.c_str(), le.c_str(), acc);
  }
  *out += StrFormat("%s_sum{%s} %.17g\n", name, labels.c_str(), h.sum);
  *out += StrFormat("%s_count{%s} %" PRIu64 "\n", name, labels.c_str(), h.count);
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

std::string PrometheusText(const std::string& model_name, const ServiceStats& s,
                           const HttpCounters& http) {
  const std::string L = "model_name=\"" + Escape(model_name) + "\"";
  std::string o;
  o.reserve(16384);
  Gauge(&o, "vllm:num_requests_running", L, s.running, "Requests in the running batch.");
  Gauge(&o, "vllm:num_requests_waiting", L, s.waiting, "Requests waiting for admission.");
  Gauge(&o, "vllm:kv_cache_usage_perc", L, s.kv_usage, "KV-cache usage (1 = full).");
  Counter(&o, "vllm:prompt_tokens_total", L, s.prompt_tokens,
          "Prompt tokens of admitted requests.");
  Counter(&o, "vllm:generation_tokens_total", L, s.generation_tokens, "Generated tokens.");
  Counter(&o, "vllm:prefix_cache_queries_total", L, s.prefix_queries,
          "Prompt tokens looked up in the prefix cache.");
  Counter(&o, "vllm:prefix_cache_hits_total", L, s.prefix_hits,
          "Prompt tokens found in the prefix cache.");
  Counter(&o, "vllm:num_preemptions_total", L, s.preemptions,
          "Requests preempted (blocks freed, recomputed later).");
  Header(&o, "vllm:request_success_total", "counter", "Finished requests by finish reason.");
  const char* reasons[kFinishReasons] = {"length",  "eos",   "stop",
                                         "context", "abort", "timeout"};  // FinishReason order
  for (int i = 0; i < kFinishReasons; ++i) {
    o += StrFormat("vllm:request_success_total{%s,finished_reason=\"%s\"} %" PRIu64 "\n", L.c_str(),
                   reasons[i], s.finished[i]);
  }
  Hist(&o, "vllm:time_to_first_token_seconds", L, s.ttft, "Time to first token (from arrival).");
  Hist(&o, "vllm:inter_token_latency_seconds", L, s.itl,
       "Time between consecutive generated tokens.");
  Hist(&o, "vllm:e2e_request_latency_seconds", L, s.e2e, "Arrival to finish.");
  Hist(&o, "vllm:request_queue_time_seconds", L, s.queue_time, "Arrival to first admission.");
  Hist(&o, "vllm:request_prompt_tokens", L, s.prompt_len, "Prompt length of finished requests.");
  Hist(&o, "vllm:request_generation_tokens", L, s.generation_len,
       "Generated length of finished requests.");
  Counter(&o, "paddock_requests_rejected_total", L, s.rejected,
          "Requests refused because the queue was full (HTTP 429).");
  Counter(&o, "paddock_requests_cancelled_total", L, s.cancelled,
          "Requests cancelled (client gone or shutdown).");
  Counter(&o, "paddock_requests_timed_out_total", L, s.timeouts,
          "Requests stopped at their deadline.");
  Counter(&o, "vllm:spec_decode_num_drafts_total", L, s.spec_drafts,
          "Speculative decoding: verification steps (each checks one request's drafts).");
  Counter(&o, "vllm:spec_decode_num_draft_tokens_total", L, s.spec_draft_tokens,
          "Speculative decoding: tokens drafted.");
  Counter(&o, "vllm:spec_decode_num_accepted_tokens_total", L, s.spec_accepted_tokens,
          "Speculative decoding: drafted tokens the target accepted.");
  Counter(&o, "paddock_grammar_masks_total", L, s.grammar_masks,
          "Constrained decoding: token masks computed (one per constrained token).");
  CounterSeconds(&o, "paddock_grammar_mask_seconds_total", L, s.grammar_mask_seconds,
                 "Constrained decoding: seconds spent computing token masks.");
  Counter(&o, "paddock_forked_choices_total", L, s.forked_choices,
          "Choices of n > 1 requests started by forking their prompt's KV blocks.");
  Counter(&o, "paddock_engine_steps_total", L, s.steps, "Batched forward steps.");
  Counter(&o, "paddock_engine_step_tokens_total", L, s.step_tokens,
          "Tokens computed in forward steps (prompt and generated).");
  Header(&o, "paddock_memory_bytes", "gauge",
         "Memory by kind: weights, KV pool, KV in use, scratch.");
  o += StrFormat("paddock_memory_bytes{%s,kind=\"weights\"} %" PRIu64 "\n", L.c_str(),
                 s.memory.weight_bytes);
  o += StrFormat("paddock_memory_bytes{%s,kind=\"kv_pool\"} %" PRIu64 "\n", L.c_str(),
                 s.memory.kv_allocated_bytes);
  o += StrFormat("paddock_memory_bytes{%s,kind=\"kv_used\"} %" PRIu64 "\n", L.c_str(),
                 s.memory.kv_used_bytes);
  o += StrFormat("paddock_memory_bytes{%s,kind=\"scratch\"} %" PRIu64 "\n", L.c_str(),
                 s.memory.scratch_bytes);
  Header(&o, "paddock_http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [code, n] : http.by_status) {
    o +=
        StrFormat("paddock_http_responses_total{%s,code=\"%d\"} %" PRIu64 "\n", L.c_str(), code, n);
  }
  Header(&o, "paddock_http_connections", "gauge", "Open HTTP connections.");
  o += StrFormat("paddock_http_connections{%s} %" PRIu64 "\n", L.c_str(), http.connections_open);
  Header(&o, "paddock_http_connections_refused_total", "counter",
         "Connections closed at once because the connection cap was reached.");
  o += StrFormat("paddock_http_connections_refused_total{%s} %" PRIu64 "\n", L.c_str(),
                 http.refused);
  Header(&o, "paddock_http_timeouts_total", "counter",
         "Connections closed for a header, body or idle deadline.");
  o += StrFormat("paddock_http_timeouts_total{%s} %" PRIu64 "\n", L.c_str(), http.timeouts);
  Header(&o, "paddock_http_oversized_total", "counter",
         "Requests refused or cut for headers or bodies past their limits.");
  o += StrFormat("paddock_http_oversized_total{%s} %" PRIu64 "\n", L.c_str(), http.oversized);
  return o;
}

}  // namespace paddock::server
