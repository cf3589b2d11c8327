#include "support/log_capture.h"

namespace idempotency::testing {

LogCapture::LogCapture() {
  set_log_sink([this](const LogRecord& r) {
    std::lock_guard lock(mutex_);
    records_.push_back(r);
  });
}

LogCapture::~LogCapture() { set_log_sink(nullptr); }

std::vector<LogRecord> LogCapture::records() const {
  std::lock_guard lock(mutex_);
  return records_;
}

int LogCapture::count(const std::string& event) const {
  std::lock_guard lock(mutex_);
  int n = 0;
  for (const auto& r : records_) n += r.event == event ? 1 : 0;
  return n;
}

std::string LogCapture::all_text() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& r : records_) out += format_json_line(r) + "\n";
  return out;
}

}  // namespace idempotency::testing
