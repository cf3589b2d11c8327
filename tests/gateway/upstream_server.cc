// gateway_test_upstream: the app the gateway forwards to in the end-to-end tests.
//
// Every request but the two below is "processed": it is counted per id, its
// X-Idempotency-Fence is kept, and it is answered 201 with a body naming the call number.
// The id is the X-Test-Id header, else the Idempotency-Key header, else the push envelope's
// message.messageId. The behaviour comes from the X-Test-Behavior header, else the
// message's `test_behavior` attribute:
//   fail        answer 500 every time
//   fail_first  answer 500 on the first call for the id
//   hang_first  sleep `test_sleep_ms` (default 2000) on the first call, then answer
//   slow        sleep `test_sleep_ms` (default 800) on every call, then answer
//   huge        answer 200 with a 50 MB body, Content-Length framed (streamed: this process
//               never holds it)
//   huge_chunked the same, chunked
//   breaks_off  answer 200 with a Content-Length of 100, then close after 10 bytes
//   sized       answer 201 with a body of X-Test-Body-Bytes bytes
//   invalid_status answer 999, a status no HTTP server may send
//   says_replayed answer 201 with the gateway's own Idempotency-Replayed and
//               Idempotency-Response-Omitted headers, as an app might by mistake
// Calls are counted when they arrive, before any sleep, so a test can wait for "in flight".
//   GET /count?id=ID   the number of calls for ID
//   GET /fence?id=ID   the last X-Idempotency-Fence seen for ID ("" when none)
// Prints "listening on PORT" once bound to 127.0.0.1 (a free port, or the one `--port N`
// names); exits 0 on SIGTERM.
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace {

constexpr std::size_t kHugeBytes = 50'000'000;
const std::string kChunk(64 * 1024, 'x');  // what a huge answer is made of

struct State {
  std::mutex mutex;
  std::map<std::string, int> calls;           // guarded by mutex
  std::map<std::string, std::string> fences;  // guarded by mutex
};

// The message part of a push envelope, or null.
nlohmann::json message_of(const httplib::Request& request) {
  auto body = nlohmann::json::parse(request.body, nullptr, false);
  if (body.is_object() && body.contains("message") && body["message"].is_object()) {
    return body["message"];
  }
  return nullptr;
}

std::string attribute(const nlohmann::json& message, const char* name) {
  if (message.is_object() && message.contains("attributes") && message["attributes"].is_object() &&
      message["attributes"].contains(name) && message["attributes"][name].is_string()) {
    return message["attributes"][name].get<std::string>();
  }
  return {};
}

std::string id_of(const httplib::Request& request, const nlohmann::json& message) {
  if (request.has_header("X-Test-Id")) return request.get_header_value("X-Test-Id");
  if (request.has_header("Idempotency-Key")) return request.get_header_value("Idempotency-Key");
  if (message.is_object() && message.contains("messageId") && message["messageId"].is_string()) {
    return message["messageId"].get<std::string>();
  }
  return "?";
}

void process(State& state, const httplib::Request& request, httplib::Response& response) {
  const auto message = message_of(request);
  const std::string id = id_of(request, message);
  std::string behavior = request.get_header_value("X-Test-Behavior");
  if (behavior.empty()) behavior = attribute(message, "test_behavior");
  std::string sleep_text = request.get_header_value("X-Test-Sleep-Ms");
  if (sleep_text.empty()) sleep_text = attribute(message, "test_sleep_ms");

  int call = 0;
  {
    std::lock_guard lock(state.mutex);
    call = ++state.calls[id];
    state.fences[id] = request.get_header_value("X-Idempotency-Fence");
  }
  const bool first = call == 1;
  if (behavior == "slow" || (behavior == "hang_first" && first)) {
    const int fallback = behavior == "slow" ? 800 : 2000;
    const int ms = sleep_text.empty() ? fallback : std::atoi(sleep_text.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  if (behavior == "huge") {
    response.status = 200;
    response.set_header("X-Upstream-Call", std::to_string(call));
    response.set_content_provider(
        kHugeBytes, "application/octet-stream",
        [](std::size_t /*offset*/, std::size_t length, httplib::DataSink& sink) {
          return sink.write(kChunk.data(), std::min(length, kChunk.size()));
        });
    return;
  }
  if (behavior == "huge_chunked") {
    response.status = 200;
    response.set_header("X-Upstream-Call", std::to_string(call));
    response.set_chunked_content_provider(
        "application/octet-stream", [](std::size_t offset, httplib::DataSink& sink) {
          if (offset >= kHugeBytes) {
            sink.done();
            return true;
          }
          return sink.write(kChunk.data(), std::min(kHugeBytes - offset, kChunk.size()));
        });
    return;
  }
  if (behavior == "breaks_off") {
    response.status = 200;
    response.set_header("X-Upstream-Call", std::to_string(call));
    // Promises 100 bytes, sends 10 and gives up: httplib closes the connection mid-body.
    response.set_content_provider(
        100, "text/plain",
        [](std::size_t /*offset*/, std::size_t /*length*/, httplib::DataSink& sink) {
          sink.write("only ten..", 10);
          return false;
        });
    return;
  }
  if (behavior == "sized") {
    // A 201 whose body is X-Test-Body-Bytes bytes.
    response.status = 201;
    response.set_content(
        std::string(
            std::strtoul(request.get_header_value("X-Test-Body-Bytes").c_str(), nullptr, 10), 'b'),
        "application/octet-stream");
    return;
  }
  if (behavior == "invalid_status") {
    response.status = 999;
    response.set_content("nine nine nine\n", "text/plain");
    return;
  }
  if (behavior == "says_replayed") {
    response.status = 201;
    response.set_header("Idempotency-Replayed", "true");
    response.set_header("idempotency-response-omitted", "too-large");
    response.set_content("processed call " + std::to_string(call) + "\n", "text/plain");
    return;
  }
  if (behavior == "fail" || (behavior == "fail_first" && first)) {
    response.status = 500;
    response.set_content("failed call " + std::to_string(call) + "\n", "text/plain");
    return;
  }
  response.status = 201;
  response.set_header("X-Upstream-Call", std::to_string(call));
  response.set_content(
      "processed call " + std::to_string(call) + " " + request.method + " " + request.path + "\n",
      "text/plain");
}

}  // namespace

int main(int argc, char** argv) {
  int wanted_port = 0;  // 0: any free port
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      wanted_port = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--port N]\n", argv[0]);
      return 2;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  State state;
  httplib::Server server;
  // Enough workers that idle keep-alive connections from the gateway's pool never starve it.
  server.new_task_queue = [] { return new httplib::ThreadPool(64); };
  server.Get("/count", [&](const httplib::Request& request, httplib::Response& response) {
    std::lock_guard lock(state.mutex);
    const auto it = state.calls.find(request.get_param_value("id"));
    response.set_content(std::to_string(it == state.calls.end() ? 0 : it->second), "text/plain");
  });
  server.Get("/fence", [&](const httplib::Request& request, httplib::Response& response) {
    std::lock_guard lock(state.mutex);
    const auto it = state.fences.find(request.get_param_value("id"));
    response.set_content(it == state.fences.end() ? "" : it->second, "text/plain");
  });
  auto handler = [&](const httplib::Request& request, httplib::Response& response) {
    process(state, request, response);
  };
  server.Get(".*", handler);
  server.Post(".*", handler);
  server.Put(".*", handler);
  server.Patch(".*", handler);
  server.Delete(".*", handler);

  int port = wanted_port;
  if (wanted_port == 0) {
    port = server.bind_to_any_port("127.0.0.1");
  } else if (!server.bind_to_port("127.0.0.1", wanted_port)) {
    port = -1;
  }
  if (port <= 0) return 1;
  std::thread serving([&] { server.listen_after_bind(); });
  std::printf("listening on %d\n", port);
  std::fflush(stdout);
  int received = 0;
  sigwait(&signals, &received);
  // Sleeping handlers hold no state worth waiting for: leave at once.
  std::fflush(stdout);
  std::_Exit(0);
}
