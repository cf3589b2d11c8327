// LocalHttpServer: a tiny HTTP/1.1 server on 127.0.0.1 for JWKS URL tests.
//
// It answers every request, whatever the path, with the status and body last set, one
// request per connection, and counts the requests. Thread safety: all members may be called
// from any thread while the server thread runs.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

namespace idempotency::testing {

class LocalHttpServer {
 public:
  /// LocalHttpServer() binds 127.0.0.1 on a free port and starts serving.
  LocalHttpServer();
  /// ~LocalHttpServer() stops serving and closes the port.
  ~LocalHttpServer();
  LocalHttpServer(const LocalHttpServer&) = delete;
  LocalHttpServer& operator=(const LocalHttpServer&) = delete;

  /// set_response() sets what every following request is answered with.
  void set_response(int status, std::string body);
  /// url() returns `http://127.0.0.1:PORT/oauth2/v3/certs`.
  [[nodiscard]] std::string url() const;
  /// requests() counts the requests answered so far.
  [[nodiscard]] int requests() const { return requests_.load(); }

 private:
  void serve();
  void answer(int client);

  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mutex_;
  int status_ = 200;
  std::string body_;
  std::thread thread_;
};

}  // namespace idempotency::testing
