// gateway_demo: what `./dev demo` runs. The pubsub-idempotency-gateway sidecar on the SQLite
// default, in front of a demo upstream that counts how often each message reaches it. A burst
// of pushes plays Pub/Sub at its worst — every message redelivered, some raced by concurrent
// redeliveries, nacked ones retried — and a table shows the upstream saw each message once.
//
//   gateway_demo GATEWAY_BINARY
#include <idempotency/http.h>
#include <idempotency/log.h>
#include <idempotency/pubsub/message.h>

#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace http = idempotency::http;
namespace pubsub = idempotency::pubsub;

extern char** environ;

namespace {

std::string envelope(const std::string& id) {
  return R"({"message":{"messageId":")" + id +
         R"(","data":"b3JkZXI="},"subscription":"projects/demo/subscriptions/orders"})";
}

// Starts the gateway and returns its pid and the port it reports on stdout.
std::pair<pid_t, int> start_gateway(const std::string& binary, int upstream_port,
                                    const std::string& db) {
  int out[2];
  if (pipe(out) != 0) return {-1, 0};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {binary,
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--upstream",
                                   "http://127.0.0.1:" + std::to_string(upstream_port),
                                   "--backend",
                                   "sqlite://" + db};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) return {-1, 0};
  std::string seen;
  char buf[256];
  ssize_t n = 0;
  while (seen.find('\n') == std::string::npos && (n = read(out[0], buf, sizeof buf)) > 0) {
    seen.append(buf, static_cast<std::size_t>(n));
  }
  close(out[0]);
  const auto at = seen.find("listening on ");
  return {pid, at == std::string::npos ? 0 : std::stoi(seen.substr(at + 13))};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gateway_demo GATEWAY_BINARY\n");
    return 2;
  }
  idempotency::set_log_sink([](const idempotency::LogRecord&) {});  // keep the table readable
  // The demo upstream: any language's service; it counts what reaches it.
  std::mutex mutex;
  std::map<std::string, int> upstream_calls;
  http::Server upstream([&](const pubsub::PushRequest& request) {
    auto parsed = pubsub::parse_push(request);
    if (auto* m = std::get_if<pubsub::Message>(&parsed); m != nullptr && m->message_id) {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));  // real work takes time
      std::lock_guard lock(mutex);
      ++upstream_calls[*m->message_id];
    }
    return pubsub::PushResponse{200, {}, "processed\n"};
  });
  const int upstream_port = upstream.start("127.0.0.1", 0);

  const auto dir = std::filesystem::temp_directory_path() / "idempotency-gateway-demo";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto [gateway, port] = start_gateway(argv[1], upstream_port, (dir / "idem.db").string());
  if (gateway < 0 || port == 0) {
    std::fprintf(stderr, "the gateway did not start\n");
    return 1;
  }
  std::printf("gateway on 127.0.0.1:%d (SQLite %s) -> demo upstream on 127.0.0.1:%d\n\n", port,
              (dir / "idem.db").c_str(), upstream_port);

  // Pub/Sub at its worst: each message pushed by 3 concurrent deliveries, then redelivered
  // once more later; a nacked delivery is retried (with back-off) until it is acked.
  constexpr int kMessages = 12;
  struct Counts {
    int deliveries = 0, acks = 0, nacks = 0;
  };
  std::map<std::string, Counts> counts;
  auto count = [&](const std::string& id, int status) {
    std::lock_guard lock(mutex);
    Counts& c = counts[id];
    ++c.deliveries;
    if (!pubsub::is_ack(status)) ++c.nacks;
    if (pubsub::is_ack(status)) ++c.acks;
  };
  auto deliver = [&](const std::string& id) {
    httplib::Client client("127.0.0.1", port);
    for (int attempt = 1; attempt <= 20; ++attempt) {
      auto r = client.Post("/", envelope(id), "application/json");
      const int status = r ? r->status : 0;
      count(id, status);
      if (pubsub::is_ack(status)) return;
      // Pub/Sub redelivers a nack after a back-off.
      std::this_thread::sleep_for(std::chrono::milliseconds(50 * attempt));
    }
  };
  {
    std::vector<std::jthread> pushes;
    for (int m = 0; m < kMessages; ++m) {
      const std::string id = "order-" + std::to_string(1000 + m);
      for (int copy = 0; copy < 3; ++copy) pushes.emplace_back(deliver, id);
    }
  }
  for (int m = 0; m < kMessages; ++m) deliver("order-" + std::to_string(1000 + m));  // redelivery

  kill(gateway, SIGTERM);
  int status = 0;
  waitpid(gateway, &status, 0);
  upstream.stop();

  // "suppressed": acked deliveries that never reached the upstream (204 duplicates, and
  // concurrent copies that joined the running delivery on the same instance).
  std::printf("%-12s %10s %6s %6s %11s %15s\n", "message", "deliveries", "acks", "nacks",
              "suppressed", "upstream calls");
  bool all_once = true;
  Counts total;
  for (int m = 0; m < kMessages; ++m) {
    const std::string id = "order-" + std::to_string(1000 + m);
    const int calls = upstream_calls[id];
    const Counts& c = counts[id];
    all_once = all_once && calls == 1;
    total.deliveries += c.deliveries;
    total.acks += c.acks;
    total.nacks += c.nacks;
    std::printf("%-12s %10d %6d %6d %11d %15d\n", id.c_str(), c.deliveries, c.acks, c.nacks,
                c.acks - calls, calls);
  }
  std::printf("%-12s %10d %6d %6d %11d %15s\n", "total", total.deliveries, total.acks, total.nacks,
              total.acks - kMessages, all_once ? "all 1" : "NOT ALL 1");
  const bool clean_exit = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("\ngateway stopped on SIGTERM: %s\n", clean_exit ? "exit 0" : "unclean");
  std::printf("%s\n", all_once && clean_exit ? "every message reached the upstream exactly once"
                                             : "SOMETHING WENT WRONG");
  return all_once && clean_exit ? 0 : 1;
}
