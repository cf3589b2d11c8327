// The gateway's HTTP edge, end to end: pubsub-idempotency-gateway and gateway_test_upstream as
// real processes over real sockets, on SQLite (the edge does not depend on the store).
//
// Pins "the HTTP edge, rebuilt: async, strict, bounded": malformed requests are refused before
// the upstream ever sees them; an oversized body is refused from its header alone; slow-header
// connections neither starve ordinary pushes nor stay open past their deadline; an upstream
// that hangs keeps the key held until the lease lapses, one that refuses releases it at once;
// a huge upstream answer is never held whole. Raw TCP sockets send what no well-behaved client
// library would. Tests wait on observable state (the upstream's counts, the gateway's answers),
// never on sleeps as synchronisation.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gateway_client.h"
#include "support/child_process.h"
#include "support/raw_connection.h"
#include "support/temp_dir.h"

namespace idempotency::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// A free loopback port: bound, then released (nothing listens there afterwards).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto* raw = reinterpret_cast<sockaddr*>(&addr);  // NOLINT: the sockets API takes a sockaddr*
  socklen_t length = sizeof(addr);
  int port = 0;
  if (fd >= 0 && ::bind(fd, raw, sizeof(addr)) == 0 && ::getsockname(fd, raw, &length) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

// A POST /push with `extra` header lines (each ending in CRLF) between the usual ones and the
// blank line, then `body`.
std::string raw_push(const std::string& body, const std::string& extra = {}) {
  return "POST /push HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

// The pid of this process's child running `program` (the gateway: one at a time per test).
std::optional<pid_t> child_running(const std::string& program) {
  const auto wanted = std::filesystem::canonical(program);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after its closing paren.
    const auto paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != ::getpid()) continue;
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink(entry.path() / "exe", ec);
    if (!ec && exe == wanted) return static_cast<pid_t>(std::stol(name));
  }
  return std::nullopt;
}

// A /proc/<pid>/status field in kB (VmHWM: the peak resident set), or -1.
long status_kib(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

std::uintmax_t size_or_zero(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size;
}

std::string metric_line(std::string_view outcome, int n) {
  return "idempotency_gateway_requests_total{outcome=\"" + std::string(outcome) + "\"} " +
         std::to_string(n) + "\n";
}

class gateway_edge : public ::testing::Test {
 protected:
  void SetUp() override { upstream_ = start_upstream(); }

  static std::unique_ptr<ChildProcess> start_upstream(std::vector<std::string> args = {}) {
    return std::make_unique<ChildProcess>(GATEWAY_UPSTREAM_PATH, std::move(args),
                                          std::vector<std::pair<std::string, std::string>>{});
  }

  std::unique_ptr<ChildProcess> start_gateway(
      std::vector<std::string> extra = {}, std::string upstream = {},
      std::vector<std::pair<std::string, std::string>> env = {}) {
    if (upstream.empty()) upstream = "http://127.0.0.1:" + std::to_string(upstream_->port());
    std::vector<std::string> args{"--listen", "127.0.0.1:0", "--upstream",
                                  upstream,   "--backend",   "sqlite://" + db_};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(GATEWAY_PATH, std::move(args), std::move(env));
  }

  [[nodiscard]] int calls(const std::string& id, int port = 0) const {
    if (port == 0) port = upstream_->port();
    return std::stoi(send(port, "GET", "/count?id=" + id).body);
  }
  [[nodiscard]] std::string fence(const std::string& id) const {
    return send(upstream_->port(), "GET", "/fence?id=" + id).body;
  }
  // The store's bytes on disk: the database and its write-ahead log.
  [[nodiscard]] std::uintmax_t store_bytes() const {
    return size_or_zero(db_) + size_or_zero(db_ + "-wal");
  }
  // The gateway's peak resident set, in bytes.
  static long peak_rss_bytes() {
    const auto pid = child_running(GATEWAY_PATH);
    if (!pid) return -1;
    return status_kib(*pid, "VmHWM") * 1024;
  }

  TempDir dir_;
  std::string db_ = dir_.file("idem.db");
  std::unique_ptr<ChildProcess> upstream_;
};

// --- strictness: refused before the upstream sees anything -----------------------------

TEST_F(gateway_edge, MalformedRequestsAre400AndNeverForwarded) {
  auto gateway = start_gateway();
  struct Case {
    const char* what;
    std::string (*request)(const std::string& body);
  };
  const Case cases[] = {
      {"bare CR forging the fence",
       [](const std::string& body) {
         return raw_push(body, "X-A: a\rX-Idempotency-Fence: 999999\r\n");
       }},
      {"obs-fold",
       [](const std::string& body) { return raw_push(body, "X-A: a\r\n  folded\r\n"); }},
      {"NUL in a header value",
       [](const std::string& body) { return raw_push(body, std::string("X-A: a\0b\r\n", 10)); }},
      {"bare LF line endings",
       [](const std::string& body) {
         return "POST /push HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\n"
                "Content-Length: " +
                std::to_string(body.size()) + "\n\n" + body;
       }},
      {"Content-Length and Transfer-Encoding",
       [](const std::string& body) {
         std::ostringstream chunked;
         chunked << std::hex << body.size() << "\r\n" << body << "\r\n0\r\n\r\n";
         return "POST /push HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Content-Length: " +
                std::to_string(chunked.str().size()) + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
                chunked.str();
       }},
      {"a space in a field name",
       [](const std::string& body) { return raw_push(body, "Bad Name: x\r\n"); }},
      {"parentheses in a field name",
       [](const std::string& body) { return raw_push(body, "X(A): y\r\n"); }},
      {"an HTTP/1.1 request without Host",
       [](const std::string& body) {
         return "POST /push HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body;
       }},
      {"two Host fields", [](const std::string& body) { return raw_push(body, "Host: b\r\n"); }},
      {"Transfer-Encoding in HTTP/1.0",
       [](const std::string& body) {
         std::ostringstream chunked;
         chunked << std::hex << body.size() << "\r\n" << body << "\r\n0\r\n\r\n";
         return "POST /push HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n" +
                chunked.str();
       }},
      {"a request target that is not a path",
       [](const std::string& body) {
         std::string request = raw_push(body);
         return request.replace(0, std::string_view("POST /push").size(), "POST push");
       }},
  };
  int n = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string id = "m-strict-" + std::to_string(++n);
    RawConnection connection(gateway->port());
    ASSERT_TRUE(connection.is_open());
    connection.send(c.request(envelope(id)));
    connection.read_until("\r\n");
    EXPECT_EQ(connection.status(), 400) << connection.received();
    EXPECT_EQ(calls(id), 0) << "never forwarded";
  }
  // The gateway is still serving.
  EXPECT_EQ(post(gateway->port(), envelope("m-strict-after")), 201);
}

TEST_F(gateway_edge, AWellFormedPushIsForwardedOnceWithTheGatewaysFenceNotTheClients) {
  auto gateway = start_gateway();
  RawConnection connection(gateway->port());
  ASSERT_TRUE(connection.is_open());
  connection.send(raw_push(envelope("m-strict-ok"), "X-Idempotency-Fence: 999999\r\n"));
  connection.read_until("\r\n\r\n");
  EXPECT_EQ(connection.status(), 201) << connection.received();
  EXPECT_EQ(calls("m-strict-ok"), 1);
  EXPECT_EQ(fence("m-strict-ok"), "1") << "the client's fence header is never forwarded";
}

TEST_F(gateway_edge, ATransferCodingBesidesChunkedIs501AndNeverForwarded) {
  auto gateway = start_gateway();
  const std::string body = envelope("m-gzip-chunked");
  std::ostringstream chunked;
  chunked << std::hex << body.size() << "\r\n" << body << "\r\n0\r\n\r\n";
  RawConnection connection(gateway->port());
  ASSERT_TRUE(connection.is_open());
  // De-chunked and forwarded without the field, the body would reach the app still "gzip"ped
  // and named plain.
  connection.send(
      "POST /push HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: gzip, chunked\r\n\r\n" +
      chunked.str());
  connection.read_until("\r\n");
  EXPECT_EQ(connection.status(), 501) << connection.received();
  EXPECT_EQ(calls("m-gzip-chunked"), 0) << "never forwarded";
}

TEST_F(gateway_edge, AnAbsoluteFormTargetIsForwardedAsItsPathToTheUpstreamsOwnHost) {
  auto gateway = start_gateway({"--mode", "idempotency-key"});
  RawConnection connection(gateway->port());
  ASSERT_TRUE(connection.is_open());
  const std::string body = R"({"amount":1})";
  connection.send(
      "POST http://evil.example/v1/charges?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Idempotency-Key: k-absolute\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  connection.read_until("POST /v1/charges\n");
  EXPECT_EQ(connection.status(), 201) << connection.received();
  // The upstream (an origin server, which takes an absolute-form target's authority as the
  // host) saw the path alone: evil.example never reached it.
  EXPECT_TRUE(contains(connection.received(), "processed call 1 POST /v1/charges\n"))
      << connection.received();
  EXPECT_EQ(calls("k-absolute"), 1);
}

TEST_F(gateway_edge, AHeaderOverMaxHeaderBytesIs431AndNeverForwarded) {
  auto gateway = start_gateway({"--max-header-bytes", "4KiB"});
  RawConnection connection(gateway->port());
  ASSERT_TRUE(connection.is_open());
  connection.send(raw_push(envelope("m-431"), "X-Big: " + std::string(8000, 'a') + "\r\n"));
  connection.read_until("\r\n");
  EXPECT_EQ(connection.status(), 431) << connection.received();
  EXPECT_EQ(calls("m-431"), 0);
}

// --- bodies: refused from the header, invited with 100 Continue only when acceptable -----

TEST_F(gateway_edge, AnOversizedContentLengthIs413AtOnceAndTheBodyIsNeverInvited) {
  auto gateway = start_gateway({"--max-body", "1MiB"});
  for (const bool expect_continue : {false, true}) {
    SCOPED_TRACE(expect_continue ? "with Expect: 100-continue" : "without Expect");
    RawConnection connection(gateway->port());
    ASSERT_TRUE(connection.is_open());
    const auto start = Clock::now();
    connection.send(
        "POST /push HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 100000000\r\n" +
        std::string(expect_continue ? "Expect: 100-continue\r\n" : "") + "\r\n");
    connection.read_until("\r\n");
    const auto elapsed = Clock::now() - start;
    EXPECT_EQ(connection.status(), 413) << connection.received();
    // Waiting for the body would end at a deadline: 10 s for the header, 60 s for the body.
    EXPECT_LT(elapsed, seconds(5)) << "from the header alone, not after a body timeout";
    connection.read_to_close(seconds(3));
    EXPECT_FALSE(contains(connection.received(), "100 Continue")) << connection.received();
  }
}

TEST_F(gateway_edge, AnAcceptableBodyWithExpect100ContinueIsInvitedThenAnswered) {
  auto gateway = start_gateway();
  const std::string body = envelope("m-continue");
  RawConnection connection(gateway->port());
  ASSERT_TRUE(connection.is_open());
  connection.send(
      "POST /push HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Expect: 100-continue\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n");
  const std::string& interim = connection.read_until("\r\n\r\n");
  ASSERT_EQ(interim.rfind("HTTP/1.1 100 Continue\r\n", 0), 0U) << interim;
  EXPECT_EQ(calls("m-continue"), 0);
  const std::size_t final_at = interim.find("\r\n\r\n") + 4;
  connection.send(body);
  const std::string& all = connection.read_until("\r\n\r\n", seconds(5), final_at);
  EXPECT_EQ(all.compare(final_at, 13, "HTTP/1.1 201 "), 0) << all;
  EXPECT_EQ(calls("m-continue"), 1);
}

TEST_F(gateway_edge, TheDefaultMaxBodyAdmitsAWrappedPushOfA10MBMessage) {
  auto gateway = start_gateway();
  const std::string body = envelope("m-10mb", {}, std::string(10'000'000, 'x'));
  ASSERT_GT(body.size(), 13'000'000U);
  EXPECT_EQ(post(gateway->port(), body), 201) << "the upstream's own status";
  EXPECT_EQ(calls("m-10mb"), 1);
}

TEST_F(gateway_edge, TheEdgeFlagsCanComeFromTheEnvironment) {
  auto gateway = start_gateway({}, {},
                               {{"IDEMPOTENCY_MAX_BODY", "2KiB"},
                                {"IDEMPOTENCY_HEADER_TIMEOUT", "2s"},
                                {"IDEMPOTENCY_BODY_TIMEOUT", "2s"},
                                {"IDEMPOTENCY_IDLE_TIMEOUT", "2s"},
                                {"IDEMPOTENCY_MAX_CONNECTIONS", "64"},
                                {"IDEMPOTENCY_MAX_HEADER_BYTES", "16KiB"},
                                {"IDEMPOTENCY_MAX_RESPONSE", "64KiB"},
                                {"IDEMPOTENCY_UPSTREAM_TIMEOUT", "5s"},
                                {"IDEMPOTENCY_UPSTREAM_CONNECT_TIMEOUT", "1s"},
                                {"IDEMPOTENCY_WORKERS", "2"},
                                {"IDEMPOTENCY_IO_THREADS", "2"}});
  EXPECT_EQ(post(gateway->port(), envelope("m-env")), 201);
  EXPECT_EQ(post(gateway->port(), envelope("m-env-big", {}, std::string(4096, 'x'))), 413);
  EXPECT_EQ(calls("m-env-big"), 0);
}

// --- slow clients cannot starve the gateway ---------------------------------------------

TEST_F(gateway_edge, SlowHeaderConnectionsNeitherStarvePushesNorOutliveTheHeaderDeadline) {
  constexpr auto kHeaderTimeout = seconds(5);
  auto gateway = start_gateway({"--header-timeout", "5s", "--workers", "2"});
  std::vector<std::unique_ptr<RawConnection>> slow;
  const auto opened = Clock::now();
  for (int i = 0; i < 40; ++i) {
    auto connection = std::make_unique<RawConnection>(gateway->port());
    ASSERT_TRUE(connection->is_open());
    ASSERT_TRUE(connection->send("POST /push HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "));
    slow.push_back(std::move(connection));
  }
  {
    // One more header byte on every connection every 200 ms: each stays "making progress".
    std::jthread trickle([&](const std::stop_token& stop) {
      while (!stop.stop_requested()) {
        for (const auto& connection : slow) {
          (void)::send(connection->fd(), "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        std::this_thread::sleep_for(milliseconds(200));
      }
    });
    // Were the workers held by slow connections, they would be freed only when the gateway cut
    // those at their header deadline: every push must be answered well before that.
    for (int i = 0; i < 5; ++i) {
      const std::string id = "m-slowloris-" + std::to_string(i);
      EXPECT_EQ(post(gateway->port(), envelope(id)), 201);
      EXPECT_LT(Clock::now() - opened, kHeaderTimeout - milliseconds(500))
          << "an ordinary push waited behind the slow connections";
    }
    // They were served while every slow connection was still open (checked only while well
    // inside the header deadline, so a slow machine cannot make this flaky).
    if (Clock::now() < opened + kHeaderTimeout - seconds(1)) {
      int open = 0;
      for (const auto& connection : slow) {
        if (!connection->read_to_close(milliseconds(1))) ++open;
      }
      EXPECT_EQ(open, 40) << "slow connections were dropped before their header deadline";
    }
    // Every slow connection is closed by the server once its header deadline has passed (not
    // before), however steadily it trickles.
    const auto deadline = opened + kHeaderTimeout + seconds(5);
    int closed = 0;
    auto first_closed = Clock::now();
    for (const auto& connection : slow) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (!connection->read_to_close(std::max(left, milliseconds(1)))) continue;
      if (++closed == 1) first_closed = Clock::now();
    }
    EXPECT_EQ(closed, 40);
    EXPECT_GE(first_closed - opened, kHeaderTimeout - milliseconds(500)) << "closed too early";
  }
  EXPECT_EQ(post(gateway->port(), envelope("m-slowloris-after")), 201);
}

// --- upstream failures: held while it may still act, released when it provably did not ---

TEST_F(gateway_edge, AHungUpstreamIsNacked503AndTheKeyStaysHeldUntilTheLeaseLapses) {
  // The upstream timeout also bounds the retake's call, which must succeed: 2 s. The lease
  // outlasts it by 6 s, the time the second push has to find the key still held; the hung call
  // outlasts the lease twice over, so the key is retaken while it may still be acting.
  constexpr auto kUpstreamTimeout = seconds(2);
  constexpr auto kLease = seconds(8);
  constexpr auto kHang = 2 * kLease;
  auto gateway =
      start_gateway({"--upstream-timeout", std::to_string(kUpstreamTimeout.count()) + "s",
                     "--lease", std::to_string(kLease.count()) + "s"});
  const auto body =
      envelope("m-hung", {{"test_behavior", "hang_first"},
                          {"test_sleep_ms", std::to_string(milliseconds(kHang).count())}});
  const auto start = Clock::now();
  EXPECT_EQ(post(gateway->port(), body), 503);
  EXPECT_LT(Clock::now() - start, kUpstreamTimeout + seconds(3))
      << "answered at about the upstream timeout, not when the hung call ends";
  const std::string first_fence = fence("m-hung");

  EXPECT_EQ(post(gateway->port(), body), 503) << "held: the hung call may still be acting";
  EXPECT_EQ(calls("m-hung"), 1);
  const auto metrics = send(gateway->port(), "GET", "/metrics").body;
  EXPECT_TRUE(contains(metrics, metric_line("nack_upstream_no_answer", 1))) << metrics;

  // Pub/Sub keeps redelivering; once the lease lapses a redelivery takes the key over.
  EXPECT_EQ(redeliver_until_not_503(gateway->port(), body, start + kLease + seconds(12)), 201);
  EXPECT_EQ(calls("m-hung"), 2);
  const std::string second_fence = fence("m-hung");
  ASSERT_FALSE(first_fence.empty());
  ASSERT_FALSE(second_fence.empty());
  EXPECT_GT(std::stoll(second_fence), std::stoll(first_fence)) << "the newer claim is fenced";
  EXPECT_EQ(post(gateway->port(), body), 204);
  EXPECT_EQ(calls("m-hung"), 2);
}

TEST_F(gateway_edge, ARefusedConnectionIsNacked503AndTheKeyIsReleasedAtOnce) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  auto gateway = start_gateway({}, "http://127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(post(gateway->port(), envelope("m-refused")), 503);
  const auto metrics = send(gateway->port(), "GET", "/metrics").body;
  EXPECT_TRUE(contains(metrics, metric_line("nack_upstream_unreachable", 1))) << metrics;

  // A held key would answer 503 for the whole (15 min default) lease.
  auto late = start_upstream({"--port", std::to_string(port)});
  ASSERT_EQ(late->port(), port);
  EXPECT_EQ(post(gateway->port(), envelope("m-refused")), 201);
  EXPECT_EQ(calls("m-refused", port), 1);
  EXPECT_EQ(post(gateway->port(), envelope("m-refused")), 204);
  EXPECT_EQ(calls("m-refused", port), 1);
}

TEST_F(gateway_edge, AnUpstreamFailureIsCountedAsNackUpstream) {
  auto gateway = start_gateway();
  EXPECT_EQ(post(gateway->port(), envelope("m-fails", {{"test_behavior", "fail"}})), 500);
  const auto metrics = send(gateway->port(), "GET", "/metrics").body;
  EXPECT_TRUE(contains(metrics, metric_line("nack_upstream", 1))) << metrics;
}

// --- a huge upstream answer is never held whole --------------------------------------------

// How much the gateway's peak resident set may grow over its huge exchanges: less than one
// answer (50 MB). Measured as growth, because a sanitizer build starts far higher (ASan's
// shadow memory: ~77 MB idle) than a plain one (~10 MB).
constexpr long kMemoryGrowthBound = 40L * 1024 * 1024;
constexpr std::uintmax_t kStoreBound = 1024 * 1024;

// Several answers of each framing: how the upstream's header and first body bytes happen to
// arrive together or apart varies, and each arrangement must stay bounded.
constexpr int kHugeAnswersPerFraming = 3;

TEST_F(gateway_edge, AHugeUpstreamAnswerToAPushIsAckedInBoundedMemory) {
  auto gateway = start_gateway();
  // One ordinary exchange first, so the baseline holds the gateway at work, not just started.
  (void)send(gateway->port(), "GET", "/healthz");
  const long baseline = peak_rss_bytes();
  ASSERT_GT(baseline, 0);
  for (const char* behavior : {"huge", "huge_chunked"}) {
    for (int i = 0; i < kHugeAnswersPerFraming; ++i) {
      const std::string id = std::string("m-") + behavior + "-" + std::to_string(i);
      SCOPED_TRACE(id);
      const auto body = envelope(id, {{"test_behavior", behavior}});
      const int status = post(gateway->port(), body);
      EXPECT_GE(status, 200);
      EXPECT_LE(status, 299) << "Pub/Sub reads only the status";
      EXPECT_EQ(post(gateway->port(), body), 204);
      EXPECT_EQ(calls(id), 1);
    }
  }
  const long peak = peak_rss_bytes();
  ASSERT_GT(peak, 0);
  EXPECT_LT(peak - baseline, kMemoryGrowthBound) << "the gateway's peak resident set grew by";
  EXPECT_LT(store_bytes(), kStoreBound);
}

TEST_F(gateway_edge, AHugeUpstreamAnswerWithAnIdempotencyKeyIsStoredAndReplayedWithoutItsBody) {
  auto gateway = start_gateway({"--mode", "idempotency-key"});
  // One ordinary exchange first, so the baseline holds the gateway at work, not just started.
  (void)send(gateway->port(), "GET", "/healthz");
  const long baseline = peak_rss_bytes();
  ASSERT_GT(baseline, 0);
  for (const char* behavior : {"huge", "huge_chunked"}) {
    for (int i = 0; i < kHugeAnswersPerFraming; ++i) {
      const std::string key = std::string("k-") + behavior + "-" + std::to_string(i);
      SCOPED_TRACE(key);
      const httplib::Headers headers{{"Idempotency-Key", key}, {"X-Test-Behavior", behavior}};
      const auto first = send(gateway->port(), "POST", "/v1/charges", R"({"amount":1})", headers);
      EXPECT_EQ(first.status, 200);
      EXPECT_EQ(first.body, "");
      EXPECT_EQ(first.header("Idempotency-Response-Omitted"), "too-large");
      EXPECT_FALSE(first.has_header("Idempotency-Replayed"));

      const auto again = send(gateway->port(), "POST", "/v1/charges", R"({"amount":1})", headers);
      EXPECT_EQ(again.status, 200);
      EXPECT_EQ(again.body, "");
      EXPECT_EQ(again.header("Idempotency-Response-Omitted"), "too-large");
      EXPECT_EQ(again.header("Idempotency-Replayed"), "true");
      EXPECT_EQ(calls(key), 1);
    }
  }

  const long peak = peak_rss_bytes();
  ASSERT_GT(peak, 0);
  EXPECT_LT(peak - baseline, kMemoryGrowthBound) << "the gateway's peak resident set grew by";
  EXPECT_LT(store_bytes(), kStoreBound);
}

}  // namespace
}  // namespace idempotency::testing
