// The default JSON log line and the sink's rules.
#include "idempotency/log.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "support/log_capture.h"

namespace idempotency::testing {
namespace {

TEST(Log, TheDefaultLineIsOneJsonObjectWithCloudLoggingFields) {
  const std::string line = format_json_line(
      LogRecord{Severity::kWarning, "contention", "a \"quoted\"\nmessage\x01", {{"fence", "3"}}});
  EXPECT_EQ(line, R"({"severity":"WARNING","message":"a \"quoted\"\nmessage\u0001",)"
                  R"("event":"contention","fence":"3"})");
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(Log, SeverityNamesAreCloudLoggings) {
  EXPECT_STREQ(severity_name(Severity::kDebug), "DEBUG");
  EXPECT_STREQ(severity_name(Severity::kInfo), "INFO");
  EXPECT_STREQ(severity_name(Severity::kError), "ERROR");
  EXPECT_STREQ(severity_name(Severity::kCritical), "CRITICAL");
}

TEST(Log, ASinkThatThrowsNeverChangesControlFlow) {
  set_log_sink([](const LogRecord&) { throw std::runtime_error("sink down"); });
  EXPECT_NO_THROW(log(LogRecord{Severity::kError, "x", "y", {}}));
  set_log_sink(nullptr);
}

TEST(Log, ACaptureSeesRecords) {
  LogCapture capture;
  log(LogRecord{Severity::kInfo, "hello", "world", {}});
  EXPECT_EQ(capture.count("hello"), 1);
}

}  // namespace
}  // namespace idempotency::testing
