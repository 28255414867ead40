// base/trace.h: a Chrome trace-event recorder (the JSON Perfetto and chrome://tracing open),
// for `--trace FILE`: operators per thread, engine steps, scheduling decisions, request spans.
//
// Off unless a Tracer exists: the code that records holds a Tracer* and pays one branch when it
// is null. Recording is thread-safe (one lock per event: tracing is for looking, not for
// measuring the last percent) and bounded (past kMaxEvents the rest are dropped and the file
// says so). The file is written once, by Write() or the destructor.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace paddock {

class Tracer {
 public:
  static constexpr size_t kMaxEvents = 4u << 20;
  // Opens `path` for writing now: throws Error naming it if it cannot.
  explicit Tracer(const std::string& path);
  ~Tracer();  // Write()

  // Times are NowSeconds(). `args`: a JSON object's members ("\"n\": 3"), or empty.
  void Span(const char* name, const char* cat, double t0, double t1, const std::string& args = "");
  void Instant(const char* name, const char* cat, double t, const std::string& args = "");
  // Nestable async spans (a request and its phases), matched by cat and id.
  void AsyncBegin(const char* name, const char* cat, uint64_t id, double t,
                  const std::string& args = "");
  void AsyncEnd(const char* name, const char* cat, uint64_t id, double t);
  void Counter(const char* name, double t, double value);
  // Names the calling thread in the trace ("engine", "worker 1", "http").
  void NameThread(const std::string& name);
  void Write();

 private:
  struct Event {
    char ph;
    const char* name;
    const char* cat;
    int tid;
    double ts, dur;  // microseconds
    uint64_t id;
    std::string args;
  };
  void Add(Event e);
  std::string path_;
  FILE* file_;
  double t0_;
  std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::pair<int, std::string>> thread_names_;
  size_t dropped_ = 0;
  bool written_ = false;
};

// Records a span from construction to destruction on the calling thread (nothing if null).
class TraceScope {
 public:
  TraceScope(Tracer* t, const char* name, const char* cat, std::string args = "");
  ~TraceScope();

 private:
  Tracer* t_;
  const char* name_;
  const char* cat_;
  std::string args_;
  double t0_ = 0;
};

}  // namespace paddock
