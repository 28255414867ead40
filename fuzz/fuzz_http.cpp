// libFuzzer target: raw bytes sent to the HTTP layer (server/http.h over libmicrohttpd) on a
// loopback socket, one connection per input, the handler parsing POST bodies as API requests
// and answering /stream with a body produced across a suspend and a wake from another thread.
// Malformed requests, floods and odd framing are fine; a crash, a hang or a leak is not.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "server/api.h"
#include "server/http.h"

namespace {

using paddock::server::BodySource;
using paddock::server::HttpRequest;
using paddock::server::HttpResponse;

// Three pieces, the second only after a wake from another thread.
class WakeSource : public BodySource {
 public:
  void SetWaker(paddock::server::Waker w) override { waker_ = std::move(w); }
  Pull Next(std::string* out) override {
    if (step_ == 1) {
      step_ = 2;
      std::thread([w = waker_] { w(); }).detach();
      return Pull::kWait;
    }
    if (step_ >= 4) return Pull::kEnd;
    out->append("data: piece\n\n");
    ++step_;
    return Pull::kData;
  }

 private:
  paddock::server::Waker waker_;
  int step_ = 0;
};

void Handle(const HttpRequest& req, HttpResponse* res) {
  if (req.path == "/stream") {
    res->stream = std::make_shared<WakeSource>();
    return;
  }
  paddock::server::ApiContext ctx;
  ctx.model_name = "m";
  ctx.context = 64;
  try {
    paddock::server::ParseRequest(req.body, req.path.find("chat") != std::string::npos, ctx);
    res->body = "{}";
  } catch (const paddock::server::ApiError& e) {
    res->status = e.status;
    res->body = paddock::server::ErrorBody(e);
  }
}

paddock::server::HttpServer* Server() {
  static paddock::server::HttpServer* s = [] {
    paddock::server::HttpLimits l;
    l.max_body_bytes = 1 << 16;
    l.header_seconds = 1;
    l.body_seconds = 1;
    l.idle_seconds = 1;
    auto* srv = new paddock::server::HttpServer("127.0.0.1", 0, l, Handle);
    srv->Start();
    return srv;
  }();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int port = Server()->port();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return 0;
  }
  for (size_t off = 0; off < size;) {
    const ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  // The server must end every exchange: answer and close, or close, within its deadlines.
  while (poll(&p, 1, 5000) > 0 && recv(fd, buf, sizeof(buf), 0) > 0) {
  }
  close(fd);
  return 0;
}
