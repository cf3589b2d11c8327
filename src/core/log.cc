#include "idempotency/log.h"

#include <array>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>

namespace idempotency {
namespace {

// The core links only the standard library and libcrypto, so it escapes its few JSON
// strings itself; everything else in the project uses nlohmann-json.
void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          std::array<char, 7> esc{};
          std::snprintf(esc.data(), esc.size(), "\\u%04x", static_cast<unsigned char>(c));
          out += esc.data();
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void default_sink(const LogRecord& record) {
  static std::mutex stderr_mutex;  // one whole line at a time
  std::string line = format_json_line(record);
  line.push_back('\n');
  std::lock_guard lock(stderr_mutex);
  std::cerr << line << std::flush;
}

struct SinkSlot {
  std::mutex mutex;
  std::shared_ptr<const LogSink> sink;
};

SinkSlot& slot() {
  static SinkSlot s;
  return s;
}

}  // namespace

const char* severity_name(Severity s) noexcept {
  switch (s) {
    case Severity::kDebug:
      return "DEBUG";
    case Severity::kInfo:
      return "INFO";
    case Severity::kWarning:
      return "WARNING";
    case Severity::kError:
      return "ERROR";
    case Severity::kCritical:
      return "CRITICAL";
  }
  return "DEFAULT";
}

std::string format_json_line(const LogRecord& record) {
  std::string out = "{\"severity\":";
  append_json_string(out, severity_name(record.severity));
  out += ",\"message\":";
  append_json_string(out, record.message);
  if (!record.event.empty()) {
    out += ",\"event\":";
    append_json_string(out, record.event);
  }
  for (const auto& [name, value] : record.fields) {
    out.push_back(',');
    append_json_string(out, name);
    out.push_back(':');
    append_json_string(out, value);
  }
  out.push_back('}');
  return out;
}

void set_log_sink(LogSink sink) {
  auto next = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  std::lock_guard lock(slot().mutex);
  slot().sink = std::move(next);
}

void log(const LogRecord& record) noexcept {
  try {
    std::shared_ptr<const LogSink> sink;
    {
      std::lock_guard lock(slot().mutex);
      sink = slot().sink;
    }
    if (sink) {
      (*sink)(record);
    } else {
      default_sink(record);
    }
  } catch (...) {
    // Observation never changes control flow: a failing sink is ignored.
  }
}

}  // namespace idempotency
