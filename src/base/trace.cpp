#include "base/trace.h"

#include <atomic>
#include <cstring>

#include "base/strings.h"
#include "base/timer.h"

namespace paddock {
namespace {

// Small, stable thread ids for the trace (1, 2, ... in order of first use).
int ThreadId() {
  static std::atomic<int> next{1};
  thread_local int id = next.fetch_add(1);
  return id;
}

void AppendEscaped(std::string* o, const char* s) {
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') o->push_back('\\');
    o->push_back(*s);
  }
}

}  // namespace

Tracer::Tracer(const std::string& path) : path_(path), t0_(NowSeconds()) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) Fail("--trace: cannot write '%s': %s", path.c_str(), std::strerror(errno));
  events_.reserve(1 << 16);
}

Tracer::~Tracer() {
  Write();
}

void Tracer::Add(Event e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (written_) return;
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

void Tracer::Span(const char* name, const char* cat, double t0, double t1,
                  const std::string& args) {
  Add({'X', name, cat, ThreadId(), (t0 - t0_) * 1e6, (t1 - t0) * 1e6, 0, args});
}

void Tracer::Instant(const char* name, const char* cat, double t, const std::string& args) {
  Add({'i', name, cat, ThreadId(), (t - t0_) * 1e6, 0, 0, args});
}

void Tracer::AsyncBegin(const char* name, const char* cat, uint64_t id, double t,
                        const std::string& args) {
  Add({'b', name, cat, ThreadId(), (t - t0_) * 1e6, 0, id, args});
}

void Tracer::AsyncEnd(const char* name, const char* cat, uint64_t id, double t) {
  Add({'e', name, cat, ThreadId(), (t - t0_) * 1e6, 0, id, ""});
}

void Tracer::Counter(const char* name, double t, double value) {
  Add({'C', name, "counter", ThreadId(), (t - t0_) * 1e6, 0, 0, StrFormat("\"value\": %g", value)});
}

void Tracer::NameThread(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  thread_names_.emplace_back(ThreadId(), name);
}

void Tracer::Write() {
  std::lock_guard<std::mutex> lock(mu_);
  if (written_) return;
  written_ = true;
  std::string o = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  o += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 1, \"args\": {\"name\": \"paddock\"}}";
  for (const auto& [tid, name] : thread_names_) {
    o += StrFormat(",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": %d, ", tid);
    o += "\"args\": {\"name\": \"";
    AppendEscaped(&o, name.c_str());
    o += "\"}}";
  }
  for (const Event& e : events_) {
    o += ",\n{\"ph\": \"";
    o.push_back(e.ph);
    o += "\", \"name\": \"";
    AppendEscaped(&o, e.name);
    o += "\", \"cat\": \"";
    AppendEscaped(&o, e.cat);
    o += StrFormat("\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f", e.tid, e.ts);
    if (e.ph == 'X') o += StrFormat(", \"dur\": %.3f", e.dur);
    if (e.ph == 'b' || e.ph == 'e')
      o += StrFormat(", \"id\": \"0x%llx\"", (unsigned long long)e.id);
    if (e.ph == 'i') o += ", \"s\": \"t\"";
    if (!e.args.empty()) o += ", \"args\": {" + e.args + "}";
    o += "}";
    if (o.size() > (1u << 20)) {
      std::fwrite(o.data(), 1, o.size(), file_);
      o.clear();
    }
  }
  if (dropped_ > 0)
    o += StrFormat(
        ",\n{\"ph\": \"i\", \"name\": \"trace full: %zu events dropped\", \"pid\": 1, \"tid\": 0, "
        "\"ts\": 0, \"s\": \"g\"}",
        dropped_);
  o += "\n]}\n";
  std::fwrite(o.data(), 1, o.size(), file_);
  std::fclose(file_);
  file_ = nullptr;
  events_.clear();
  events_.shrink_to_fit();
}

TraceScope::TraceScope(Tracer* t, const char* name, const char* cat, std::string args)
    : t_(t), name_(name), cat_(cat), args_(std::move(args)) {
  if (t_ != nullptr) t0_ = NowSeconds();
}

TraceScope::~TraceScope() {
  if (t_ != nullptr) t_->Span(name_, cat_, t0_, NowSeconds(), args_);
}

}  // namespace paddock
