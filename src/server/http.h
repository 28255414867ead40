// server/http.h: the event-driven HTTP/1.1 layer under the API server (libmicrohttpd).
//
// Goals: no thread per connection (a few event threads over epoll serve every connection, so
// thousands of idle, slow or streaming clients cost memory, not threads); every resource a
// client can make the server spend is bounded: connections (a cap, refused at once), header
// bytes and count, body bytes however they arrive (Content-Length checked before the body is
// read, chunked bodies cut where they pass the limit), the time to send the request line and
// headers, the time to send the body, idle keep-alive time, and a client that stops reading.
// Compressed request bodies are refused (415), not inflated. HTTP/1.0 clients get plain
// bodies and a closed connection; HTTP/1.1 keep-alive and pipelining work.
//
// Handlers run on the event threads and must not block: a response whose body is not ready
// (a generation) is a BodySource that the event thread pulls when the socket can take bytes;
// a source with nothing to give says kWait and calls its Waker when it has more. Routing,
// methods (404 / 405), CORS and keys are the handler's business, not this layer's.
//
// After a burst, once no request has been in flight for a second, the heap the allocator holds
// but does not use is given back (malloc_trim), so RSS returns near its idle size.
//
// Non-goals: TLS (put HAProxy or another proxy in front), HTTP/2, request decompression.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace paddock::server {

struct HttpRequest {
  std::string method;                                        // as sent: GET, POST, ...
  std::string path;                                          // the URL path, query string removed
  std::string version;                                       // HTTP/1.0 or HTTP/1.1
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  std::string body;
  // The first header of that name (case-insensitive), or empty.
  std::string_view Header(std::string_view name) const;
};

// Wakes a suspended response (any thread; after the exchange ended it does nothing).
using Waker = std::function<void()>;

struct HttpResponse;
// Gives a deferred response (any thread, once; after the exchange ended it does nothing).
using Reply = std::function<void(HttpResponse)>;

// A response body produced over time. Next is called on an event thread whenever the
// connection can take more bytes; Abort when the exchange ends before kEnd (the client left,
// timed out or stopped reading).
class BodySource {
 public:
  enum class Pull { kData, kWait, kEnd };
  virtual ~BodySource() = default;
  // Appends bytes to *out (kData), has nothing now (kWait: call the waker when there is), or
  // is finished (kEnd, nothing appended). Called about once a second while waiting too, so a
  // source can send a keep-alive probe that notices a closed connection.
  virtual Pull Next(std::string* out) = 0;
  virtual void Abort() {}
  // Given once, before the first Next.
  virtual void SetWaker(Waker waker) = 0;
  // A whole body, not a stream: the status line and headers wait for it, so a failure found at
  // the end is answered with its own status (a lost device: 503), never a 200 with an error in
  // the body. Such a source sends no keep-alive probes; the HTTP layer watches the socket
  // instead and aborts the source when the client leaves.
  virtual bool Whole() const { return false; }
  // With Whole(), once Next returned kEnd: the status (0: the response's). A 503 goes out with
  // Retry-After: 1 (the engine failed; a restart or another replica can serve).
  virtual int Status() const { return 0; }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::shared_ptr<BodySource> stream;  // set: the body is streamed (chunked on HTTP/1.1)
  // Set: the answer comes later. The handler's work is costly (a large body to parse, a
  // grammar to compile), so it is done elsewhere: `later` is called once with the Reply that
  // gives the real response; meanwhile the connection waits suspended, holding no event thread.
  // If the server stops first, the client gets a 503.
  std::function<void(Reply)> later;
  // Sets a header, replacing one of the same name (case-insensitive): never sent twice.
  void SetHeader(std::string name, std::string value) {
    for (auto& [n, v] : headers) {
      if (n.size() != name.size()) continue;
      bool same = true;
      for (size_t i = 0; i < n.size() && same; ++i) same = (n[i] | 0x20) == (name[i] | 0x20);
      if (same) {
        v = std::move(value);
        return;
      }
    }
    headers.emplace_back(std::move(name), std::move(value));
  }
};

struct HttpLimits {
  size_t max_body_bytes = 8u << 20;
  size_t max_connections = 4096;     // more are closed at once
  size_t connection_memory = 32768;  // per connection: request line + headers + read buffer
  int max_headers = 100;             // header fields per request (431 beyond)
  double header_seconds = 10;        // request line + headers, from connect or the last answer
  double body_seconds = 60;          // the whole body, once the headers are in
  unsigned idle_seconds = 30;        // no byte moved either way (a client that stops reading)
  int threads = 2;                   // event threads
};

// Called per request once the body is complete (or at the headers for requests without one);
// fills the response. Exceptions become a 500.
using HttpHandler = std::function<void(const HttpRequest&, HttpResponse*)>;

struct HttpStats {
  uint64_t connections_open = 0;
  uint64_t refused = 0;       // closed at once: over the connection cap
  uint64_t timeouts = 0;      // header, body or idle deadline reached
  uint64_t oversized = 0;     // 413 / 431 / body cut at the limit
  uint64_t streams_open = 0;  // responses still being produced
};

// A bound, listening TCP socket (non-blocking, close-on-exec, the largest backlog); throws
// Error naming the address if it cannot.
int ListenTcp(const std::string& host, int port);
int BoundPort(int fd);

class HttpServer {
 public:
  // Binds and listens (host may be a name, an IPv4 or an IPv6 address; port 0: any free one);
  // throws Error if it cannot.
  HttpServer(const std::string& host, int port, const HttpLimits& limits, HttpHandler handler);
  ~HttpServer();  // Stop()
  int port() const;
  // Starts the event threads.
  void Start();
  // Waits up to `seconds` for the open streams to finish, then closes every connection and
  // stops the event threads. Idempotent.
  void Stop(double seconds);
  HttpStats Stats() const;
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace paddock::server
