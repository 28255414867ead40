// server/http.cpp: HttpServer over libmicrohttpd (Debian's libmicrohttpd-dev, 0.9.75: a small,
// well-kept C HTTP/1.1 server library with an epoll event loop, a per-connection memory pool
// that bounds headers, a connection cap, inactivity timeouts, and suspend/resume for
// responses produced later; its request parser is fuzzed upstream). What it does not give is
// added here: header-count, Content-Length and body limits, refusal of compressed bodies,
// deadlines for the headers and the body (a housekeeping thread shuts the socket of a
// connection past its deadline; the event loop then closes it), periodic wake-ups of waiting
// streams, and giving freed heap back after a burst.
#include "server/http.h"

#include <malloc.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "base/strings.h"
#include "base/timer.h"

namespace paddock::server {

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  return {};
}

namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One request and, once it is answered with a stream, the pull state of its body.
struct Exchange {
  HttpRequest req;
  struct Connection* conn_record = nullptr;
  bool answered = false;
  const std::atomic<bool>* closing = nullptr;  // the server is stopping: no more waiting
  std::mutex mu;                   // guards what follows: the event thread pulls, any thread wakes
  MHD_Connection* conn = nullptr;  // null once the exchange ended
  bool suspended = false;
  std::shared_ptr<BodySource> source;
  bool deferred = false;                // waiting for a Reply (HttpResponse::later)
  std::unique_ptr<HttpResponse> ready;  // the Reply's response, not yet answered
  // A whole body (BodySource::Whole) being gathered while the connection waits suspended: its
  // source, the response it completes, the bytes so far, and whether it has ended (gathered,
  // or given up: the client left or the connection ended).
  std::shared_ptr<BodySource> whole;
  std::unique_ptr<HttpResponse> whole_res;
  std::string whole_body;
  bool whole_done = false;
  std::string buf;  // pulled, not yet handed to the socket
  size_t off = 0;
  bool ended = false;
};

// One TCP connection: what the deadlines need.
struct Connection {
  int fd = -1;
  double waiting_since = 0;  // waiting for a request line and headers since (0: in a request)
  double body_since = 0;     // reading a body since (0: not)
  bool shut = false;         // deadline passed: socket shut down
};

// A JSON error body for the answers this layer gives itself.
std::string ErrorJson(int status, const char* type, const char* message) {
  return StrFormat("{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":null}}",
                   message, type);
}

}  // namespace

struct HttpServer::Impl {
  HttpLimits limits;
  HttpHandler handler;
  int listen_fd = -1;
  int port = 0;
  MHD_Daemon* daemon = nullptr;
  std::atomic<bool> closing{false};

  std::mutex conns_mu;
  std::unordered_map<Connection*, bool> conns;  // every open connection
  std::mutex streams_mu;
  std::unordered_map<Exchange*, std::weak_ptr<Exchange>> streams;   // answered with a stream
  std::unordered_map<Exchange*, std::weak_ptr<Exchange>> deferred;  // waiting for a Reply

  std::atomic<uint64_t> connections_open{0}, refused{0}, timeouts{0}, oversized{0};
  std::atomic<uint64_t> streams_open{0}, busy{0};
  std::atomic<bool> freed_since_trim{false};

  std::thread housekeeper;
  std::mutex hk_mu;
  std::condition_variable hk_cv;
  bool hk_stop = false;

  void Housekeep();
  MHD_Result Access(MHD_Connection* c, const char* url, const char* method, const char* version,
                    const char* upload, size_t* upload_size, void** con_cls);
  MHD_Result Answer(MHD_Connection* c, Exchange& x, const std::shared_ptr<Exchange>& xp,
                    HttpResponse& res);
  MHD_Result Refuse(MHD_Connection* c, Exchange& x, int status, const char* type,
                    const char* message);
  MHD_Result Defer(MHD_Connection* c, Exchange& x, const std::shared_ptr<Exchange>& xp,
                   HttpResponse& res);
  MHD_Result Resumed(MHD_Connection* c, Exchange& x, const std::shared_ptr<Exchange>& xp);
  MHD_Result HoldWhole(MHD_Connection* c, Exchange& x, const std::shared_ptr<Exchange>& xp,
                       HttpResponse& res);
  bool GatherWhole(Exchange& x);
  std::shared_ptr<BodySource> TakeWhole(Exchange& x);
  void WatchWhole();
  static MHD_Result Queue(MHD_Connection* c, const HttpResponse& res, MHD_Response* r = nullptr);
  void Completed(void** con_cls, MHD_RequestTerminationCode code);
  void Notify(MHD_Connection* c, void** socket_context, MHD_ConnectionNotificationCode code);
  static void Wake(const std::weak_ptr<Exchange>& w);
  static ssize_t Pull(void* cls, uint64_t pos, char* buf, size_t max);
};

namespace {}  // namespace

// The largest backlog the system allows: bursts of clients would otherwise overflow it
// (dropped handshakes, retries).
int ListenTcp(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res) != 0)
    Fail("cannot listen on %s:%d (unknown address)", host.c_str(), port);
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) Fail("cannot listen on %s:%d (in use or not permitted)", host.c_str(), port);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

namespace {

// Every connection is a file descriptor: the soft limit is raised to the hard one, and the
// connection cap kept below it.
size_t RaiseFileLimit(size_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return want;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  const size_t room = rl.rlim_cur > 128 ? static_cast<size_t>(rl.rlim_cur) - 64 : 64;
  return std::min(want, room);
}

// Paths are compared as sent: no percent-decoding, so "%00" cannot cut a path short and
// "/v1/%2e%2e/" stays what it is (the API has no path that needs decoding).
size_t KeepEscaped(void*, MHD_Connection*, char* s) {
  return std::strlen(s);
}

MHD_Result CollectHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* h = static_cast<std::vector<std::pair<std::string, std::string>>*>(cls);
  h->emplace_back(key ? key : "", value ? value : "");
  return MHD_YES;
}

}  // namespace

void HttpServer::Impl::Notify(MHD_Connection* c, void** socket_context,
                              MHD_ConnectionNotificationCode code) {
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    auto* rec = new Connection;
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    rec->fd = info ? info->connect_fd : -1;
    rec->waiting_since = NowSeconds();
    *socket_context = rec;
    std::lock_guard<std::mutex> lock(conns_mu);
    conns[rec] = true;
    connections_open++;
  } else if (*socket_context != nullptr) {
    // Called before the socket is closed: under conns_mu no deadline can shut a reused fd.
    auto* rec = static_cast<Connection*>(*socket_context);
    {
      std::lock_guard<std::mutex> lock(conns_mu);
      conns.erase(rec);
      connections_open--;
    }
    delete rec;
    *socket_context = nullptr;
  }
}

MHD_Result HttpServer::Impl::Refuse(MHD_Connection* c, Exchange& x, int status, const char* type,
                                    const char* message) {
  HttpResponse res;
  res.status = status;
  res.body = ErrorJson(status, type, message);
  return Answer(c, x, nullptr, res);
}

MHD_Result HttpServer::Impl::Access(MHD_Connection* c, const char* url, const char* method,
                                    const char* version, const char* upload, size_t* upload_size,
                                    void** con_cls) {
  auto* holder = static_cast<std::shared_ptr<Exchange>*>(*con_cls);
  if (holder == nullptr) {  // the request line and headers are in
    auto xp = std::make_shared<Exchange>();
    *con_cls = new std::shared_ptr<Exchange>(xp);
    Exchange& x = *xp;
    x.closing = &closing;
    busy++;
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    x.conn_record = info ? static_cast<Connection*>(info->socket_context) : nullptr;
    x.req.method = method;
    x.req.path = url;
    x.req.version = version;
    MHD_get_connection_values(c, MHD_HEADER_KIND, CollectHeader, &x.req.headers);
    const std::string_view te = x.req.Header("Transfer-Encoding");
    const std::string_view cl = x.req.Header("Content-Length");
    {
      std::lock_guard<std::mutex> lock(conns_mu);
      if (x.conn_record) {
        x.conn_record->waiting_since = 0;
        if (!te.empty() || (!cl.empty() && cl != "0")) x.conn_record->body_since = NowSeconds();
      }
    }
    if (x.req.headers.size() > static_cast<size_t>(limits.max_headers)) {
      oversized++;
      return Refuse(c, x, 431, "request_too_large", "too many header fields");
    }
    // Framing a proxy in front could read differently (request smuggling): several
    // Content-Length fields, or Content-Length with Transfer-Encoding, are refused.
    size_t lengths = 0;
    for (const auto& [k, v] : x.req.headers)
      lengths += strcasecmp(k.c_str(), "Content-Length") == 0 ? 1 : 0;
    if (lengths > 1 || (lengths == 1 && !te.empty()))
      return Refuse(c, x, 400, "invalid_request_error",
                    "ambiguous body framing (several Content-Length, or with Transfer-Encoding)");
    const std::string_view ce = x.req.Header("Content-Encoding");
    if (!ce.empty() && strncasecmp(ce.data(), "identity", std::max<size_t>(ce.size(), 8)) != 0)
      return Refuse(c, x, 415, "invalid_request_error",
                    "compressed request bodies are not accepted (send Content-Encoding: identity)");
    if (!cl.empty()) {
      char* end = nullptr;
      const unsigned long long n = strtoull(std::string(cl).c_str(), &end, 10);
      if (cl.find_first_not_of("0123456789") == std::string_view::npos &&
          n > limits.max_body_bytes) {
        oversized++;
        return Refuse(c, x, 413, "request_too_large", "the request body is too large");
      }
    }
    return MHD_YES;
  }
  Exchange& x = **holder;
  if (*upload_size != 0) {
    if (x.answered) {  // answered early (refused): the rest is not read
      *upload_size = 0;
      return MHD_YES;
    }
    if (x.req.body.size() + *upload_size > limits.max_body_bytes) {
      // A chunked body past the limit: libmicrohttpd cannot answer mid-body, so the connection
      // is closed here, before another byte is stored.
      oversized++;
      return MHD_NO;
    }
    x.req.body.append(upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  if (x.deferred) return Resumed(c, x, *holder);
  if (x.answered) return MHD_YES;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    if (x.conn_record) x.conn_record->body_since = 0;
  }
  HttpResponse res;
  try {
    handler(x.req, &res);
  } catch (const std::exception& e) {
    res = HttpResponse();
    res.status = 500;
    res.body = ErrorJson(500, "server_error", "internal error");
  }
  if (res.later) return Defer(c, x, *holder, res);
  return Answer(c, x, *holder, res);
}

// The connection waits suspended for the Reply, which stores the response and resumes it;
// libmicrohttpd then calls Access again, which answers (Resumed). Suspended under the
// exchange's lock, so a Reply that comes at once still finds it suspended.
MHD_Result HttpServer::Impl::Defer(MHD_Connection* c, Exchange& x,
                                   const std::shared_ptr<Exchange>& xp, HttpResponse& res) {
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    deferred[&x] = xp;
  }
  {
    std::lock_guard<std::mutex> lock(x.mu);
    x.conn = c;
    x.deferred = true;
    x.suspended = true;
    MHD_suspend_connection(c);
  }
  auto later = std::move(res.later);
  later([w = std::weak_ptr<Exchange>(xp)](HttpResponse r) {
    std::shared_ptr<Exchange> e = w.lock();
    if (!e) return;
    std::lock_guard<std::mutex> lock(e->mu);
    e->ready = std::make_unique<HttpResponse>(std::move(r));
    if (e->suspended && e->conn != nullptr) {
      e->suspended = false;
      MHD_resume_connection(e->conn);
    }
  });
  return MHD_YES;
}

MHD_Result HttpServer::Impl::Resumed(MHD_Connection* c, Exchange& x,
                                     const std::shared_ptr<Exchange>& xp) {
  std::unique_ptr<HttpResponse> ready;
  {
    std::lock_guard<std::mutex> lock(x.mu);
    if (!x.ready && x.whole && !x.whole_done) GatherWhole(x);
    ready = std::move(x.ready);
    if (!ready && !closing.load()) {  // (woken without a reply: wait on)
      x.suspended = true;
      MHD_suspend_connection(c);
      return MHD_YES;
    }
    x.deferred = false;
  }
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    deferred.erase(&x);
  }
  if (!ready) return Refuse(c, x, 503, "server_error", "the server is shutting down");
  return Answer(c, x, xp, *ready);
}

// A whole body's bytes so far (under the exchange's lock): once its source ends, the response
// it completes is ready (its status and headers from the source). False while it waits.
bool HttpServer::Impl::GatherWhole(Exchange& x) {
  for (;;) {
    const BodySource::Pull p = x.whole->Next(&x.whole_body);
    if (p == BodySource::Pull::kWait) return false;
    if (p == BodySource::Pull::kEnd) break;
  }
  x.whole_done = true;
  auto res = std::move(x.whole_res);
  res->body = std::move(x.whole_body);
  if (x.whole->Status() != 0) res->status = x.whole->Status();
  if (res->status == 503) res->SetHeader("Retry-After", "1");
  x.ready = std::move(res);
  streams_open--;
  return true;
}

// A whole body still being gathered, given up (under the exchange's lock): its source, for the
// caller to abort outside the lock; null if it had ended.
std::shared_ptr<BodySource> HttpServer::Impl::TakeWhole(Exchange& x) {
  if (!x.whole || x.whole_done) return nullptr;
  x.whole_done = true;
  streams_open--;
  return x.whole;
}

// A whole body: the connection waits suspended (as a deferred answer) while the source gathers
// it; its waker resumes the connection, which gathers on (Resumed); the socket is watched for a
// client that leaves (Housekeep). Gathered once now, under the lock, so a wake is never lost.
MHD_Result HttpServer::Impl::HoldWhole(MHD_Connection* c, Exchange& x,
                                       const std::shared_ptr<Exchange>& xp, HttpResponse& res) {
  auto held = std::make_unique<HttpResponse>(res);
  held->stream = nullptr;
  streams_open++;
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    deferred[&x] = xp;
  }
  std::lock_guard<std::mutex> lock(x.mu);
  x.conn = c;
  x.deferred = true;
  x.whole = res.stream;
  x.whole_res = std::move(held);
  x.whole->SetWaker([w = std::weak_ptr<Exchange>(xp)] { Wake(w); });
  if (!GatherWhole(x)) {
    x.suspended = true;
    MHD_suspend_connection(c);
    return MHD_YES;
  }
  std::unique_ptr<HttpResponse> ready = std::move(x.ready);
  x.deferred = false;
  {
    std::lock_guard<std::mutex> sl(streams_mu);
    deferred.erase(&x);
  }
  x.answered = true;
  return Queue(c, *ready);
}

// res's status and headers with the body r (a buffer, or the stream's callback), queued.
MHD_Result HttpServer::Impl::Queue(MHD_Connection* c, const HttpResponse& res, MHD_Response* r) {
  if (r == nullptr) {
    r = MHD_create_response_from_buffer(res.body.size(), const_cast<char*>(res.body.data()),
                                        MHD_RESPMEM_MUST_COPY);
  }
  if (r == nullptr) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", res.content_type.c_str());
  for (const auto& [k, v] : res.headers) MHD_add_response_header(r, k.c_str(), v.c_str());
  const MHD_Result ok = MHD_queue_response(c, static_cast<unsigned>(res.status), r);
  MHD_destroy_response(r);
  return ok;
}

MHD_Result HttpServer::Impl::Answer(MHD_Connection* c, Exchange& x,
                                    const std::shared_ptr<Exchange>& xp, HttpResponse& res) {
  if (res.stream && xp && res.stream->Whole()) return HoldWhole(c, x, xp, res);
  x.answered = true;
  if (!res.stream || !xp) return Queue(c, res);
  {
    std::lock_guard<std::mutex> lock(x.mu);
    x.conn = c;
    x.source = res.stream;
  }
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    streams[&x] = xp;
  }
  streams_open++;
  res.stream->SetWaker([w = std::weak_ptr<Exchange>(xp)] { Wake(w); });
  MHD_Response* r =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, &Impl::Pull, &x, nullptr);
  return r == nullptr ? MHD_NO : Queue(c, res, r);
}

void HttpServer::Impl::Wake(const std::weak_ptr<Exchange>& w) {
  std::shared_ptr<Exchange> x = w.lock();
  if (!x) return;
  std::lock_guard<std::mutex> lock(x->mu);
  if (x->suspended && x->conn != nullptr) {
    x->suspended = false;
    MHD_resume_connection(x->conn);
  }
}

// The event thread asks for body bytes. Everything under the exchange's lock, so a wake that
// comes while the source says "wait" is held until the connection is suspended, then resumes it.
ssize_t HttpServer::Impl::Pull(void* cls, uint64_t, char* buf, size_t max) {
  Exchange& x = *static_cast<Exchange*>(cls);
  std::lock_guard<std::mutex> lock(x.mu);
  for (;;) {
    if (x.off < x.buf.size()) {
      const size_t n = std::min(max, x.buf.size() - x.off);
      std::memcpy(buf, x.buf.data() + x.off, n);
      x.off += n;
      return static_cast<ssize_t>(n);
    }
    x.buf.clear();
    x.off = 0;
    if (x.ended) return MHD_CONTENT_READER_END_OF_STREAM;
    switch (x.source->Next(&x.buf)) {
      case BodySource::Pull::kData:
        if (x.buf.empty()) return 0;
        continue;
      case BodySource::Pull::kEnd:
        x.ended = true;
        continue;
      case BodySource::Pull::kWait:
        if (x.closing->load()) return MHD_CONTENT_READER_END_WITH_ERROR;
        x.suspended = true;
        MHD_suspend_connection(x.conn);
        return 0;
    }
  }
}

void HttpServer::Impl::Completed(void** con_cls, MHD_RequestTerminationCode code) {
  auto* holder = static_cast<std::shared_ptr<Exchange>*>(*con_cls);
  if (holder == nullptr) return;
  std::shared_ptr<Exchange> x = std::move(*holder);
  delete holder;
  *con_cls = nullptr;
  bool aborted = false;
  {
    std::lock_guard<std::mutex> lock(x->mu);
    x->conn = nullptr;
    aborted = x->source && !x->ended;
  }
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    deferred.erase(x.get());
  }
  std::shared_ptr<BodySource> whole;
  {
    std::lock_guard<std::mutex> lock(x->mu);
    whole = TakeWhole(*x);  // the connection ended before the whole body did
  }
  if (whole) whole->Abort();
  if (x->source) {
    if (aborted) x->source->Abort();
    {
      std::lock_guard<std::mutex> lock(streams_mu);
      streams.erase(x.get());
    }
    streams_open--;
  }
  if (code == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED) timeouts++;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    if (x->conn_record != nullptr && conns.count(x->conn_record)) {
      x->conn_record->waiting_since = NowSeconds();
      x->conn_record->body_since = 0;
    }
  }
  busy--;
  freed_since_trim = true;
}

// The clients waiting for a whole body: one whose socket says it hung up (or failed) has its
// source aborted (its requests cancelled, their KV freed) and its connection resumed to end.
void HttpServer::Impl::WatchWhole() {
  std::vector<std::shared_ptr<Exchange>> held;
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    for (const auto& [_, w] : deferred)
      if (auto x = w.lock()) held.push_back(std::move(x));
  }
  for (const auto& x : held) {
    int fd = -1;
    {
      std::lock_guard<std::mutex> lock(conns_mu);
      if (x->conn_record != nullptr && conns.count(x->conn_record)) fd = x->conn_record->fd;
    }
    if (fd < 0) continue;
    pollfd p{fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) continue;
    std::shared_ptr<BodySource> whole;
    {
      std::lock_guard<std::mutex> lock(x->mu);
      whole = TakeWhole(*x);
      if (!whole) continue;
      x->ready = std::make_unique<HttpResponse>();
      x->ready->status = 499;  // (nobody reads it: the client left)
      if (x->suspended && x->conn != nullptr) {
        x->suspended = false;
        MHD_resume_connection(x->conn);
      }
    }
    whole->Abort();
  }
}

// Every 250 ms: deadlines (a connection past its header or body time is shut down; the event
// loop sees the error and closes it); every second: wake the waiting streams (their sources
// may send a probe); after an idle second following work: give freed heap back (malloc_trim).
void HttpServer::Impl::Housekeep() {
  double last_wake = NowSeconds(), idle_since = 0;
  std::unique_lock<std::mutex> lock(hk_mu);
  while (!hk_cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return hk_stop; })) {
    const double now = NowSeconds();
    {
      std::lock_guard<std::mutex> cl(conns_mu);
      for (auto& [rec, _] : conns) {
        const bool late_headers =
            rec->waiting_since > 0 && now - rec->waiting_since > limits.header_seconds;
        const bool late_body = rec->body_since > 0 && now - rec->body_since > limits.body_seconds;
        if ((late_headers || late_body) && !rec->shut && rec->fd >= 0) {
          shutdown(rec->fd, SHUT_RDWR);
          rec->shut = true;
          timeouts++;
        }
      }
    }
    WatchWhole();
    if (now - last_wake >= 1.0) {
      last_wake = now;
      std::vector<std::weak_ptr<Exchange>> waiting;
      {
        std::lock_guard<std::mutex> sl(streams_mu);
        for (const auto& [_, w] : streams) waiting.push_back(w);
      }
      for (const auto& w : waiting) Wake(w);
    }
    if (busy.load() == 0) {
      if (idle_since == 0) idle_since = now;
      if (now - idle_since >= 1.0 && freed_since_trim.exchange(false)) malloc_trim(0);
    } else {
      idle_since = 0;
    }
  }
}

HttpServer::HttpServer(const std::string& host, int port, const HttpLimits& limits,
                       HttpHandler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->limits.max_connections = RaiseFileLimit(limits.max_connections);
  impl_->handler = std::move(handler);
  impl_->listen_fd = ListenTcp(host, port);
  impl_->port = BoundPort(impl_->listen_fd);
}

HttpServer::~HttpServer() {
  Stop(0);
  if (impl_->daemon == nullptr && impl_->listen_fd >= 0) close(impl_->listen_fd);
}

int HttpServer::port() const {
  return impl_->port;
}

void HttpServer::Start() {
  Impl& s = *impl_;
  auto access = [](void* cls, MHD_Connection* c, const char* url, const char* method,
                   const char* version, const char* upload, size_t* upload_size,
                   void** con_cls) -> MHD_Result {
    return static_cast<Impl*>(cls)->Access(c, url, method, version, upload, upload_size, con_cls);
  };
  auto completed = [](void* cls, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode t) {
    static_cast<Impl*>(cls)->Completed(con_cls, t);
  };
  auto notify = [](void* cls, MHD_Connection* c, void** ctx, MHD_ConnectionNotificationCode t) {
    static_cast<Impl*>(cls)->Notify(c, ctx, t);
  };
  const unsigned threads = static_cast<unsigned>(std::max(1, s.limits.threads));
  // Past the cap a connection is closed as soon as it is accepted (libmicrohttpd's own limit,
  // set above ours, would leave it waiting in the listen backlog instead).
  auto admit = [](void* cls, const sockaddr*, socklen_t) -> MHD_Result {
    Impl& s = *static_cast<Impl*>(cls);
    if (s.connections_open.load() < s.limits.max_connections) return MHD_YES;
    s.refused++;
    return MHD_NO;
  };
  s.daemon = MHD_start_daemon(
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0, +admit, &s, +access, &s,
      MHD_OPTION_LISTEN_SOCKET, s.listen_fd, MHD_OPTION_THREAD_POOL_SIZE, threads,
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(s.limits.max_connections + 64 * threads),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, s.limits.connection_memory, MHD_OPTION_CONNECTION_TIMEOUT,
      s.limits.idle_seconds, MHD_OPTION_NOTIFY_COMPLETED, +completed, &s,
      MHD_OPTION_NOTIFY_CONNECTION, +notify, &s, MHD_OPTION_STRICT_FOR_CLIENT, 1,
      MHD_OPTION_UNESCAPE_CALLBACK, &KeepEscaped, nullptr, MHD_OPTION_END);
  if (s.daemon == nullptr) Fail("cannot start the HTTP server on port %d", s.port);
  s.housekeeper = std::thread([&s] { s.Housekeep(); });
}

void HttpServer::Stop(double seconds) {
  Impl& s = *impl_;
  if (s.daemon == nullptr) return;
  const double deadline = NowSeconds() + seconds;
  while (s.streams_open.load() > 0 && NowSeconds() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.closing = true;
  {
    std::lock_guard<std::mutex> lock(s.hk_mu);
    s.hk_stop = true;
  }
  s.hk_cv.notify_all();
  if (s.housekeeper.joinable()) s.housekeeper.join();
  // Suspended connections are resumed first: their sources end (the service is gone), so each
  // pull finishes or fails instead of waiting.
  std::vector<std::weak_ptr<Exchange>> waiting;
  {
    std::lock_guard<std::mutex> lock(s.streams_mu);
    for (const auto& [_, w] : s.streams) waiting.push_back(w);
    for (const auto& [_, w] : s.deferred) waiting.push_back(w);  // (answered 503)
  }
  for (const auto& w : waiting) Impl::Wake(w);
  MHD_stop_daemon(s.daemon);
  s.daemon = nullptr;
  s.listen_fd = -1;  // closed by the daemon
}

HttpStats HttpServer::Stats() const {
  const Impl& s = *impl_;
  HttpStats st;
  st.connections_open = s.connections_open.load();
  st.refused = s.refused.load();
  st.timeouts = s.timeouts.load();
  st.oversized = s.oversized.load();
  st.streams_open = s.streams_open.load();
  return st;
}

}  // namespace paddock::server
