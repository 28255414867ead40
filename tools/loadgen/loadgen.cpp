// paddock-loadgen: drives an OpenAI-compatible server over HTTP.
//
// load mode (default): replays a workload with log-normal input/output lengths (defaults:
// mean 800 in, 300 out, scaled down to fit the model's context) at a fixed concurrency or a
// Poisson arrival rate, streaming every response, and reports throughput and TTFT /
// inter-token latency / end-to-end percentiles as a table and (--json) one JSON object.
//
// stress mode (--stress SECONDS): many clients send a mix of valid greedy requests (streaming
// and not), requests they abandon mid-stream, and malformed requests; every completed response
// must equal its prompt's greedy continuation measured alone beforehand, every malformed one
// must get a 400. Exits 1 on any mismatch, unexpected status or lost connection.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

using nlohmann::json;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  int requests = 64;
  int concurrency = 16;
  double rate = 0;  // requests/s (Poisson); 0: closed loop at `concurrency`
  double input_mean = 800, output_mean = 300, sigma = 0.5;
  bool scale = true;
  uint64_t seed = 1;
  bool json_out = false;
  double stress_seconds = 0;
  double timeout = 600;
  std::string label;
};

[[noreturn]] void Usage(const char* msg) {
  std::fprintf(
      stderr,
      "paddock-loadgen: error: %s\n"
      "usage: paddock-loadgen [--host H] [--port P] [--requests N] [--concurrency C | --rate R]\n"
      "         [--input-mean T] [--output-mean T] [--sigma S] [--no-scale] [--seed S] [--label L] "
      "[--json]\n"
      "       paddock-loadgen --stress SECONDS [--host H] [--port P] [--concurrency C] [--seed "
      "S]\n",
      msg);
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    auto num = [&](double lo, double hi) {
      const std::string v = val();
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(d >= lo && d <= hi))
        Usage((a + ": bad value '" + v + "'").c_str());
      return d;
    };
    if (a == "--host")
      o.host = val();
    else if (a == "--port")
      o.port = static_cast<int>(num(1, 65535));
    else if (a == "--requests")
      o.requests = static_cast<int>(num(1, 1e7));
    else if (a == "--concurrency")
      o.concurrency = static_cast<int>(num(1, 4096));
    else if (a == "--rate")
      o.rate = num(1e-6, 1e6);
    else if (a == "--input-mean")
      o.input_mean = num(1, 1e6);
    else if (a == "--output-mean")
      o.output_mean = num(1, 1e6);
    else if (a == "--sigma")
      o.sigma = num(0, 3);
    else if (a == "--no-scale")
      o.scale = false;
    else if (a == "--seed")
      o.seed = static_cast<uint64_t>(num(0, 1e18));
    else if (a == "--json")
      o.json_out = true;
    else if (a == "--stress")
      o.stress_seconds = num(1, 1e6);
    else if (a == "--timeout")
      o.timeout = num(1, 1e6);
    else if (a == "--label")
      o.label = val();
    else if (a == "-h" || a == "--help")
      Usage("help");
    else
      Usage(("unknown option " + a).c_str());
  }
  return o;
}

std::unique_ptr<httplib::Client> MakeClient(const Options& o) {
  auto c = std::make_unique<httplib::Client>(o.host, o.port);
  c->set_connection_timeout(10, 0);
  c->set_read_timeout(static_cast<time_t>(o.timeout), 0);
  c->set_write_timeout(30, 0);
  c->set_keep_alive(false);
  return c;
}

struct ModelFacts {
  std::string id;
  int context = 0;
  int vocab = 0;
};

ModelFacts GetModel(const Options& o) {
  auto c = MakeClient(o);
  for (int attempt = 0; attempt < 600; ++attempt) {  // the server may still be loading
    auto r = c->Get("/v1/models");
    if (r && r->status == 200) {
      const json j = json::parse(r->body);
      const json& m = j.at("data").at(0);
      return {m.at("id").get<std::string>(), m.value("max_model_len", 0), m.value("vocab_size", 0)};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "paddock-loadgen: error: no server at %s:%d\n", o.host.c_str(), o.port);
  std::exit(1);
}

// One streamed request: status, time to first token, gaps between text chunks, end time.
struct Sample {
  int status = 0;
  bool ok = false;
  double start = 0, first = 0, end = 0;
  std::vector<double> gaps;
  int prompt_tokens = 0, output_tokens = 0;
  std::string text, finish;
};

// Streams POST `path` with `body`; `abort_after_chunks` > 0 closes the connection after that
// many text chunks (a client that goes away).
Sample Stream(httplib::Client& c, const std::string& path, const json& body,
              int abort_after_chunks = 0) {
  Sample s;
  s.start = Now();
  std::string buf;
  double last = 0;
  int chunks = 0;
  bool aborted = false;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buf.append(data, len);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: ", 0) != 0) continue;  // comments (keep-alive)
      ev.erase(0, 6);
      if (ev == "[DONE]") continue;
      json j = json::parse(ev, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("usage") && j["usage"].is_object()) {
        s.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        s.output_tokens = j["usage"].value("completion_tokens", 0);
      }
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const json& ch = j["choices"][0];
      std::string piece;
      if (ch.contains("text") && ch["text"].is_string()) piece = ch["text"].get<std::string>();
      if (ch.contains("delta") && ch["delta"].contains("content") &&
          ch["delta"]["content"].is_string())
        piece = ch["delta"]["content"].get<std::string>();
      if (ch.contains("finish_reason") && ch["finish_reason"].is_string())
        s.finish = ch["finish_reason"].get<std::string>();
      if (!piece.empty()) {
        const double t = Now();
        if (s.first == 0)
          s.first = t;
        else
          s.gaps.push_back(t - last);
        last = t;
        s.text += piece;
        if (abort_after_chunks > 0 && ++chunks >= abort_after_chunks) {
          aborted = true;
          return false;
        }
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  const bool sent = c.send(req, res, err);
  s.end = Now();
  s.status = res.status;
  s.ok = sent && res.status == 200 && !aborted;
  if (!sent && !aborted) {
    s.status = -1;
    s.finish = httplib::to_string(err);
  }
  return s;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

// A replayed request: its prompt tokens, output length and arrival offset (rate mode).
struct Job {
  std::vector<int> prompt;
  int out = 0;
  double at = 0;
};

// The workload: lognormal prompt and output lengths around their means (scaled, where asked,
// so a typical request fits the context: real workloads are sized for 4k+ contexts, tiny test
// models have 512), random tokens, Poisson arrivals in rate mode. *in_mean, *out_mean: the
// means used.
std::vector<Job> MakeJobs(const Options& o, const ModelFacts& m, double* in_mean,
                          double* out_mean) {
  *in_mean = o.input_mean;
  *out_mean = o.output_mean;
  const double budget = 0.6 * m.context;
  if (o.scale && *in_mean + *out_mean > budget) {
    const double f = budget / (*in_mean + *out_mean);
    *in_mean *= f;
    *out_mean *= f;
  }
  std::mt19937_64 rng(o.seed);
  auto lognormal = [&](double mean) {
    const double mu = std::log(mean) - o.sigma * o.sigma / 2;  // E[X] = mean
    return std::lognormal_distribution<double>(mu, o.sigma)(rng);
  };
  std::vector<Job> jobs(static_cast<size_t>(o.requests));
  double t_arrival = 0;
  std::uniform_int_distribution<int> tok(m.vocab > 300 ? 260 : 3, std::max(4, m.vocab - 1));
  for (auto& j : jobs) {
    int in = std::clamp(static_cast<int>(std::lround(lognormal(*in_mean))), 4, m.context - 16);
    int out =
        std::clamp(static_cast<int>(std::lround(lognormal(*out_mean))), 2, m.context - in - 1);
    j.prompt.resize(static_cast<size_t>(in));
    for (auto& t : j.prompt) t = tok(rng);
    j.out = out;
    if (o.rate > 0) {
      t_arrival += std::exponential_distribution<double>(o.rate)(rng);
      j.at = t_arrival;
    }
  }
  return jobs;
}

// Every job streamed (greedy, ignore_eos), from `concurrency` clients or, in rate mode, at its
// arrival time (enough threads that arrivals are never held back by busy clients).
std::vector<Sample> Replay(const Options& o, const ModelFacts& m, const std::vector<Job>& jobs) {
  std::vector<Sample> samples(jobs.size());
  std::atomic<size_t> next{0};
  const double t0 = Now();
  auto worker = [&] {
    auto c = MakeClient(o);
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= jobs.size()) return;
      if (o.rate > 0) {
        const double wait = t0 + jobs[i].at - Now();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      }
      json body = {{"model", m.id},
                   {"prompt", jobs[i].prompt},
                   {"max_tokens", jobs[i].out},
                   {"temperature", 0},
                   {"ignore_eos", true},
                   {"stream", true},
                   {"stream_options", {{"include_usage", true}}}};
      samples[i] = Stream(*c, "/v1/completions", body);
    }
  };
  const int n_threads =
      o.rate > 0 ? std::min(o.requests, 512) : std::min(o.concurrency, o.requests);
  std::vector<std::thread> threads;
  for (int i = 0; i < n_threads; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return samples;
}

// The samples' figures: completions, statuses, tokens, latency distributions.
struct LoadFigures {
  std::vector<double> ttft, itl, e2e, tpot;
  std::map<int, int> statuses;
  int64_t out_tokens = 0, in_tokens = 0;
  int ok = 0;
};

LoadFigures Figures(const std::vector<Sample>& samples) {
  LoadFigures f;
  for (const auto& s : samples) {
    f.statuses[s.status]++;
    if (s.status == -1)
      std::fprintf(stderr, "paddock-loadgen: a request failed: %s\n", s.finish.c_str());
    if (!s.ok) continue;
    f.ok++;
    f.out_tokens += s.output_tokens;
    f.in_tokens += s.prompt_tokens;
    if (s.first > 0) f.ttft.push_back(s.first - s.start);
    f.e2e.push_back(s.end - s.start);
    f.itl.insert(f.itl.end(), s.gaps.begin(), s.gaps.end());
    if (s.output_tokens > 1 && s.first > 0)
      f.tpot.push_back((s.end - s.first) / (s.output_tokens - 1));
  }
  return f;
}

void PrintLoad(const Options& o, const ModelFacts& m, const LoadFigures& f, double in_mean,
               double out_mean, double wall, const json& st) {
  std::printf("model %s, %d requests, %s, input mean %.0f, output mean %.0f tokens\n", m.id.c_str(),
              o.requests,
              o.rate > 0 ? ("Poisson " + std::to_string(o.rate) + "/s").c_str()
                         : ("concurrency " + std::to_string(o.concurrency)).c_str(),
              in_mean, out_mean);
  std::printf("  completed           %d (statuses %s)\n", f.ok, st.dump().c_str());
  std::printf("  duration            %.2f s\n", wall);
  std::printf("  throughput          %.2f req/s, %.1f output tok/s, %.1f total tok/s\n",
              f.ok / wall, f.out_tokens / wall, (f.out_tokens + f.in_tokens) / wall);
  std::printf("  TTFT  p50/p90/p99   %.3f / %.3f / %.3f s\n", Percentile(f.ttft, 50),
              Percentile(f.ttft, 90), Percentile(f.ttft, 99));
  std::printf("  ITL   p50/p99       %.1f / %.1f ms\n", 1e3 * Percentile(f.itl, 50),
              1e3 * Percentile(f.itl, 99));
  std::printf("  TPOT  p50           %.1f ms\n", 1e3 * Percentile(f.tpot, 50));
  std::printf("  E2E   p50/p99       %.2f / %.2f s\n", Percentile(f.e2e, 50),
              Percentile(f.e2e, 99));
}

int RunLoad(const Options& o) {
  const ModelFacts m = GetModel(o);
  double in_mean = 0, out_mean = 0;
  const std::vector<Job> jobs = MakeJobs(o, m, &in_mean, &out_mean);
  const double t0 = Now();
  const std::vector<Sample> samples = Replay(o, m, jobs);
  const double wall = Now() - t0;
  const LoadFigures f = Figures(samples);
  json r = {{"label", o.label},
            {"model", m.id},
            {"requests", o.requests},
            {"completed", f.ok},
            {"concurrency", o.rate > 0 ? json() : json(o.concurrency)},
            {"rate", o.rate > 0 ? json(o.rate) : json()},
            {"input_mean", in_mean},
            {"output_mean", out_mean},
            {"duration_s", wall},
            {"prompt_tokens", f.in_tokens},
            {"output_tokens", f.out_tokens},
            {"request_throughput", f.ok / wall},
            {"output_throughput", static_cast<double>(f.out_tokens) / wall},
            {"total_token_throughput", static_cast<double>(f.out_tokens + f.in_tokens) / wall},
            {"ttft_p50", Percentile(f.ttft, 50)},
            {"ttft_p90", Percentile(f.ttft, 90)},
            {"ttft_p99", Percentile(f.ttft, 99)},
            {"itl_p50", Percentile(f.itl, 50)},
            {"itl_p99", Percentile(f.itl, 99)},
            {"tpot_p50", Percentile(f.tpot, 50)},
            {"e2e_p50", Percentile(f.e2e, 50)},
            {"e2e_p99", Percentile(f.e2e, 99)}};
  json st = json::object();
  for (auto [code, n] : f.statuses) st[std::to_string(code)] = n;
  r["statuses"] = st;
  if (o.json_out) {
    std::printf("%s\n", r.dump().c_str());
  } else {
    PrintLoad(o, m, f, in_mean, out_mean, wall, st);
  }
  return f.ok == o.requests ? 0 : (f.statuses.count(429) + f.statuses.count(503) > 0 ? 0 : 1);
}

// ---- stress ---------------------------------------------------------------------------------

json NonStream(httplib::Client& c, const std::string& path, const json& body, int* status,
               std::string* error) {
  auto r = c.Post(path, body.dump(), "application/json");
  *status = r ? r->status : -1;
  if (!r) {
    *error = httplib::to_string(r.error());
    return json();
  }
  json j = json::parse(r->body, nullptr, false);
  return j;
}

std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// The stress run: `concurrency` clients for `stress_seconds`, each mixing malformed requests
// (400), streams abandoned mid-way, n = 2 with logprobs, and greedy requests (streamed or not,
// free or constrained) whose every answer must equal its reference, computed alone first.
// Afterwards the server must be idle: nothing running, nothing waiting, no KV blocks held.
class StressRun {
 public:
  explicit StressRun(const Options& o) : o_(o), m_(GetModel(o)) {}

  int Run() {
    if (!References()) return 1;
    std::vector<std::thread> threads;
    const double t_end = Now() + o_.stress_seconds;
    for (int i = 0; i < o_.concurrency; ++i)
      threads.emplace_back([this, i, t_end] { Worker(i, t_end); });
    for (auto& t : threads) t.join();
    const bool idle = WaitIdle();
    json r = {{"seconds", o_.stress_seconds},
              {"clients", o_.concurrency},
              {"completed_and_matched", n_ok_.load()},
              {"abandoned", n_cancel_.load()},
              {"malformed_rejected", n_bad_.load()},
              {"busy_429_503", n_busy_.load()},
              {"mismatches", n_mismatch_.load()},
              {"unexpected", n_unexpected_.load()},
              {"idle_after", idle}};
    std::printf("%s\n", r.dump().c_str());
    return n_mismatch_ == 0 && n_unexpected_ == 0 && idle && n_ok_ > 0 ? 0 : 1;
  }

 private:
  // kind 1: a JSON Schema, 2: a GBNF grammar (constrained requests share batches with free
  // ones; batch invariance makes their outputs equal the references as well).
  static std::string Key(bool chat, size_t p, int n, int kind = 0) {
    return std::to_string(chat) + "/" + std::to_string(p) + "/" + std::to_string(n) + "/" +
           std::to_string(kind);
  }

  json Body(bool chat, size_t p, int n, bool stream, int kind = 0) const {
    json b = {{"model", m_.id}, {"max_tokens", n}, {"temperature", 0}, {"stream", stream}};
    if (chat)
      b["messages"] = json::array({{{"role", "user"}, {"content", kPrompts[p]}}});
    else
      b["prompt"] = kPrompts[p];
    if (kind == 1)
      b["response_format"] = {{"type", "json_schema"},
                              {"json_schema", {{"name", "person"}, {"schema", schema_}}}};
    if (kind == 2) b["grammar"] = "root ::= (\"- \" [a-z ]{1,20} \"\\n\"){1,4}";
    return b;
  }

  static std::string Reply(bool chat, const json& j, size_t i = 0) {
    const json& ch = j["choices"][i];
    return chat ? ch["message"]["content"].get<std::string>() : ch["text"].get<std::string>();
  }

  // Every (prompt, length, endpoint, kind) greedily, alone.
  bool References() {
    auto c = MakeClient(o_);
    for (bool chat : {false, true})
      for (size_t p = 0; p < std::size(kPrompts); ++p)
        for (int n : kLengths)
          for (int kind = 0; kind < 3; ++kind) {
            int status = 0;
            std::string error;
            json j = NonStream(*c, Path(chat), Body(chat, p, n, false, kind), &status, &error);
            if (status != 200) {
              std::fprintf(stderr, "paddock-loadgen: error: reference request failed with %d\n",
                           status);
              return false;
            }
            expected_[Key(chat, p, n, kind)] = Reply(chat, j);
          }
    return true;
  }

  static const char* Path(bool chat) { return chat ? "/v1/chat/completions" : "/v1/completions"; }

  void Log(const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu_);
    std::fprintf(stderr, "%s\n", line.c_str());
  }

  void Worker(int id, double t_end) {
    std::mt19937_64 rng(o_.seed * 7919 + static_cast<uint64_t>(id));
    auto c = MakeClient(o_);
    while (Now() < t_end) {
      const int action = std::uniform_int_distribution<int>(0, 99)(rng);
      const bool chat = rng() & 1;
      const size_t p = rng() % std::size(kPrompts);
      const int n = kLengths[rng() % std::size(kLengths)];
      if (action < 15) {
        Malformed(*c, rng);
      } else if (action < 30) {  // abandon mid-stream
        Sample s = Stream(*c, Path(chat), Body(chat, p, 48, true), 1 + static_cast<int>(rng() % 3));
        (s.status == 429 || s.status == 503 ? n_busy_ : n_cancel_)++;
      } else if (action < 40) {
        TwoChoices(*c, chat, p, n);
      } else {
        const int kind = action < 50 ? 1 + static_cast<int>(rng() % 2) : 0;  // 10% constrained
        Checked(*c, chat, p, n, kind, rng() & 1);
      }
    }
  }

  void Malformed(httplib::Client& c, std::mt19937_64& rng) {
    const std::string& b = kMalformed[rng() % std::size(kMalformed)];
    auto r = c.Post(rng() & 1 ? "/v1/completions" : "/v1/chat/completions", b, "application/json");
    // (an unknown model is a 404, as OpenAI answers it)
    const bool unknown_model = b.find("\"nope\"") != std::string::npos;
    if (r && r->status == (unknown_model ? 404 : 400)) {
      n_bad_++;
      return;
    }
    n_unexpected_++;
    Log(Fmt("malformed request got %d %s: %s", r ? r->status : -1,
            r ? "" : httplib::to_string(r.error()).c_str(), b.c_str()));
  }

  // n = 2 with logprobs: both greedy choices equal the reference.
  void TwoChoices(httplib::Client& c, bool chat, size_t p, int n) {
    json b = Body(chat, p, n, false);
    b["n"] = 2;
    if (chat) {
      b["logprobs"] = true;
      b["top_logprobs"] = 2;
    } else {
      b["logprobs"] = 2;
    }
    int status = 0;
    std::string error;
    json j = NonStream(c, Path(chat), b, &status, &error);
    if (status == 429 || status == 503) {
      n_busy_++;
      return;
    }
    bool good = status == 200 && j["choices"].size() == 2;
    for (size_t i = 0; good && i < 2; ++i) {
      const json& ch = j["choices"][i];
      const size_t n_lp = chat ? ch["logprobs"]["content"].size() : ch["logprobs"]["tokens"].size();
      good = Reply(chat, j, i) == expected_.at(Key(chat, p, n)) && n_lp > 0;
    }
    if (good) {
      n_ok_++;
      return;
    }
    n_mismatch_++;
    Log(Fmt("MISMATCH n=2 %s prompt %zu n %d: %d %s", Path(chat), p, n, status,
            j.dump().substr(0, 400).c_str()));
  }

  // A greedy request, streamed or not, free or constrained: its answer equals the reference.
  void Checked(httplib::Client& c, bool chat, size_t p, int n, int kind, bool stream) {
    std::string got, error;
    int status = 0;
    if (stream) {
      Sample s = Stream(c, Path(chat), Body(chat, p, n, true, kind));
      status = s.ok ? 200 : s.status;
      got = s.text;
      error = s.finish;
    } else {
      json j = NonStream(c, Path(chat), Body(chat, p, n, false, kind), &status, &error);
      if (status == 200) got = Reply(chat, j);
    }
    if (status == 429 || status == 503) {
      n_busy_++;
    } else if (status != 200) {
      n_unexpected_++;
      Log(Fmt("%s request failed with %d %s", stream ? "streaming" : "non-streaming", status,
              error.c_str()));
    } else if (got != expected_.at(Key(chat, p, n, kind))) {
      n_mismatch_++;
      Log(Fmt("MISMATCH %s prompt %zu n %d kind %d:\n  got  [%s]\n  want [%s]", Path(chat), p, n,
              kind, got.c_str(), expected_.at(Key(chat, p, n, kind)).c_str()));
    } else {
      n_ok_++;
    }
  }

  // Waits (at most 10 s) for the metrics to say: nothing running or waiting, no KV in use.
  bool WaitIdle() {
    auto c = MakeClient(o_);
    const std::string label = "{model_name=\"" + m_.id + "\"} 0\n";
    for (int i = 0; i < 100; ++i) {
      auto r = c->Get("/metrics");
      const std::string metrics = r ? r->body : "";
      if (Contains(metrics, "vllm:num_requests_running" + label) &&
          Contains(metrics, "vllm:num_requests_waiting" + label) &&
          Contains(metrics, "vllm:kv_cache_usage_perc" + label))
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  static bool Contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
  }

  static constexpr const char* kPrompts[] = {
      "Once upon a time", "The little dog", "Lily and Tom were", "One day, a big",
      "The sun was",      "Mom said",       "There was a girl",  "Tim had a red"};
  static constexpr int kLengths[] = {4, 16, 48};
  static inline const std::string kMalformed[] = {
      "{",
      "[]",
      "null",
      "{\"prompt\": 5}",
      "{\"prompt\": \"x\", \"max_tokens\": -3}",
      "{\"prompt\": \"x\", \"temperature\": \"hot\"}",
      "{\"prompt\": \"x\", \"max_tokens\": 100000000}",
      "{\"prompt\": \"x\", \"top_p\": 7}",
      "{\"prompt\": \"x\", \"model\": \"nope\"}",
      "{\"messages\": \"hi\"}",
      "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}",
      "{\"prompt\": \"x\", \"stop\": [1, 2]}",
      "{\"prompt\": [1, -5]}",
      "{\"prompt\": \"x\", \"n\": 17}",
      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 25}",
      "{\"prompt\": \"x\", \"grammar\": \"root ::= root \\\"a\\\"\"}",
      "{\"prompt\": \"x\", \"json_schema\": {\"type\": \"string\", \"pattern\": \"a(?=b)\"}}",
      "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\"}}",
      "\xff\xfe garbage"};

  const Options& o_;
  const ModelFacts m_;
  const json schema_ = json::parse(
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
          "age": {"type": "integer", "minimum": 0, "maximum": 99},
          "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 3}},
          "required": ["name", "age"], "additionalProperties": false})");
  std::map<std::string, std::string> expected_;  // written before the workers start
  std::atomic<int64_t> n_ok_{0}, n_cancel_{0}, n_bad_{0}, n_mismatch_{0}, n_unexpected_{0},
      n_busy_{0};
  std::mutex log_mu_;
};

int RunStress(const Options& o) {
  return StressRun(o).Run();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  try {
    return o.stress_seconds > 0 ? RunStress(o) : RunLoad(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paddock-loadgen: error: %s\n", e.what());
    return 1;
  }
}
