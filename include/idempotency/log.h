// Logging: a pluggable sink for the few events the library reports.
//
// The default sink writes one JSON object per line to stderr with Cloud Logging's
// `severity` and `message` fields, plus `event` (a stable name to alert on) and the
// record's fields. Fields never carry a raw key, only `key_fingerprint`.
//
// Thread safety: `log` may be called from any thread; `set_log_sink` swaps the sink
// atomically and a sink must itself be safe to call from several threads.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace idempotency {

/// Severities, named as Cloud Logging names them.
enum class Severity { kDebug, kInfo, kWarning, kError, kCritical };

/// LogRecord is one structured log event.
struct LogRecord {
  Severity severity = Severity::kInfo;
  /// A stable, machine-readable name, e.g. "fenced_out"; alert on it.
  std::string event;
  /// One human sentence.
  std::string message;
  /// Extra fields (name, value), e.g. {"key_fingerprint", "3f2a…"}.
  std::vector<std::pair<std::string, std::string>> fields;
};

/// LogSink receives every record the library emits.
using LogSink = std::function<void(const LogRecord&)>;

/// set_log_sink() replaces the sink; an empty function restores the default JSON sink.
void set_log_sink(LogSink sink);

/// log() sends `record` to the current sink. A sink that throws is ignored: observation
/// never changes control flow.
void log(const LogRecord& record) noexcept;

/// severity_name() returns Cloud Logging's name for `s` ("WARNING", …).
[[nodiscard]] const char* severity_name(Severity s) noexcept;

/// format_json_line() renders `record` as the one-line JSON object the default sink writes.
[[nodiscard]] std::string format_json_line(const LogRecord& record);

}  // namespace idempotency
