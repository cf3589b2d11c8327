// LogCapture: collects every record the library logs while it is alive.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "idempotency/log.h"

namespace idempotency::testing {

class LogCapture {
 public:
  /// LogCapture() routes the library's log sink here until destruction.
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  /// records() returns a copy of what was logged so far.
  std::vector<LogRecord> records() const;
  /// count() returns how many records carry `event`.
  int count(const std::string& event) const;
  /// all_text() renders every record as the default sink would, one per line.
  std::string all_text() const;

 private:
  mutable std::mutex mutex_;
  std::vector<LogRecord> records_;
};

}  // namespace idempotency::testing
