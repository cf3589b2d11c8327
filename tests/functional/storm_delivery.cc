#include "storm_delivery.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace idempotency::testing {
namespace {

// Runs `program` to its end with stdout and stderr in `out_file`; returns its exit code.
int run_to_completion(const std::string& program, std::vector<std::string> args,
                      const std::string& out_file) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int out = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) _exit(126);
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

DeliveryReport deliver(const DeliveryPlan& plan) {
  const std::string input = plan.work_dir + "/messages.jsonl";
  const std::string events = plan.work_dir + "/events.jsonl";
  const std::string output = plan.work_dir + "/simulator.out";
  {
    std::ofstream messages(input, std::ios::trunc);
    for (const auto& id : plan.message_ids) {
      messages << nlohmann::json{{"messageId", id}, {"data", "order " + id}}.dump() << '\n';
    }
  }
  // Pub/Sub's own shape, 20x faster: a 60 s ack deadline becomes 3 s, exponential back-off
  // 2-20 s becomes 100 ms-1 s. No dead-letter policy: every message must end acked.
  std::vector<std::string> args{"--balance",
                                "--input",
                                input,
                                "--concurrency",
                                std::to_string(plan.concurrency),
                                "--duplicate-rate",
                                "1",
                                "--retry",
                                "exponential",
                                "--min-backoff",
                                "2s",
                                "--max-backoff",
                                "20s",
                                "--ack-deadline",
                                "60s",
                                "--time-scale",
                                "0.05",
                                "--run-timeout",
                                "120s",
                                "--seed",
                                std::to_string(plan.seed),
                                "--events",
                                events,
                                "--json"};
  for (const auto& endpoint : plan.endpoints) {
    args.insert(args.begin(), {"--endpoint", endpoint});
  }
  DeliveryReport report{.messages = static_cast<int>(plan.message_ids.size())};
  report.exit_code = run_to_completion(plan.simulator, std::move(args), output);
  report.output = read_all(output);

  // The summary is the one JSON line of the output (a failure's line may come with it).
  std::istringstream printed(report.output);
  for (std::string line; std::getline(printed, line);) {
    const auto summary = nlohmann::json::parse(line, nullptr, false);
    if (!summary.is_object() || !summary.contains("acked")) continue;
    report.deliveries = summary.value("delivered", 0);
    report.acked = summary.value("acked", 0);
    report.nacked = summary.value("nacked", 0);
  }
  std::map<std::string, int> per_message;
  for (const auto& id : plan.message_ids) per_message[id] = 0;
  std::istringstream lines(read_all(events));
  for (std::string line; std::getline(lines, line);) {
    const auto event = nlohmann::json::parse(line, nullptr, false);
    if (event.is_object()) ++per_message[event.value("messageId", std::string())];
  }
  report.min_deliveries_per_message = std::numeric_limits<int>::max();
  for (const auto& id : plan.message_ids) {
    report.min_deliveries_per_message =
        std::min(report.min_deliveries_per_message, per_message[id]);
  }
  return report;
}

}  // namespace idempotency::testing
