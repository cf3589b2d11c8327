// EventLog: --events, one JSON line per delivery attempt, for tests and users to analyse a run.
// The lines name messageIds: the simulator is a test tool.
//
// Thread safety: not thread-safe (the simulator writes from its one event loop).
#pragma once

#include <fstream>
#include <optional>
#include <string>

namespace idempotency::push_sim {

/// One delivery attempt, as written to the events file.
struct AttemptEvent {
  std::string subscription;
  std::string message_id;
  std::string ordering_key;  ///< Empty: none.
  int attempt = 0;           ///< The deliveryAttempt this request counted as (from 1).
  bool duplicate = false;    ///< Sent by --duplicate-rate, not by a nack.
  double start_ms = 0;       ///< Milliseconds since the run started.
  double end_ms = 0;         ///< When the answer or the error came (or the run ended).
  std::optional<int> status;
  std::string error;              ///< Empty when a status came back.
  bool acked = false;             ///< This attempt acked the message.
  bool deadline_expired = false;  ///< The ack deadline passed first: the request was closed.
  bool late = false;  ///< An answer raced the close at the deadline (recorded, not acked).
  bool after_dead_letter = false;  ///< An ack status for a message already dead-lettered.
  bool abandoned = false;          ///< Still open when the run ended.
};

/// EventLog writes attempt events to a file, or nowhere when constructed without a path.
class EventLog {
 public:
  /// EventLog() opens (truncates) `path`; an empty path writes nothing. Throws
  /// std::runtime_error when the file cannot be opened.
  explicit EventLog(const std::string& path);

  /// write() appends one line and flushes it.
  void write(const AttemptEvent& event);

 private:
  std::optional<std::ofstream> out_;
};

}  // namespace idempotency::push_sim
