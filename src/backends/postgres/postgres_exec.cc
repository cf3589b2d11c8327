// The ways PostgresLock sends a statement: prepared (a session of its own), or whole with a
// transaction-local statement_timeout (a session a transaction-mode pooler shares); each
// waiting on the socket itself, up to a deadline, instead of in libpq without limit; and what a
// connection's state says about reusing it.
#include <libpq-fe.h>
#include <openssl/ssl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "postgres_internal.h"

namespace idempotency::postgres_detail {
namespace {

using SteadyClock = std::chrono::steady_clock;

bool is_error(const PGresult* r) {
  const auto status = PQresultStatus(r);
  return status == PGRES_FATAL_ERROR || status == PGRES_BAD_RESPONSE ||
         status == PGRES_NONFATAL_ERROR;
}

// tls_pending() says whether OpenSSL holds decrypted bytes libpq has not taken yet: libpq reads
// at most its buffer's free space, so part of a large TLS record can wait there while the socket
// has nothing left to signal (libpq's own wait checks the same before polling).
bool tls_pending(PGconn* conn) {
  if (PQsslInUse(conn) == 0) return false;
  const char* library = PQsslAttribute(conn, "library");
  if (library == nullptr || std::strcmp(library, "OpenSSL") != 0) return false;
  auto* ssl = static_cast<SSL*>(PQsslStruct(conn, "OpenSSL"));
  return ssl != nullptr && SSL_pending(ssl) > 0;
}

[[noreturn]] void no_answer_in_time(const Deadline& deadline) {
  throw NoAnswer("no answer within " + std::to_string(deadline.limit.count()) +
                 " ms (statement_timeout + " +
                 std::to_string(std::chrono::milliseconds(kAnswerMargin).count()) + " ms)");
}

// wait_socket() waits until the connection's socket is ready for `events`. Throws NoAnswer when
// the deadline passes first.
void wait_socket(PGconn* conn, short events, const Deadline& deadline) {
  if ((events & POLLIN) != 0 && tls_pending(conn)) return;
  pollfd pfd{PQsocket(conn), events, 0};
  if (pfd.fd < 0) return;  // closed: libpq's next call reports it without waiting
  while (true) {
    int wait_ms = -1;
    if (deadline.at != SteadyClock::time_point::max()) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline.at - SteadyClock::now());
      if (left.count() <= 0) no_answer_in_time(deadline);
      wait_ms = static_cast<int>(std::min<std::chrono::milliseconds::rep>(left.count(), INT_MAX));
    }
    const int n = ::poll(&pfd, 1, wait_ms);
    if (n > 0) return;  // ready, or an error or hang-up the next libpq call reports
    if (n < 0 && errno != EINTR) {
      throw NoAnswer("waiting for the server failed: " +
                     std::error_code(errno, std::generic_category()).message());
    }
  }
}

// flush() sends what libpq has queued, reading meanwhile (as libpq asks) so that a server
// blocked on writing its answers never stops reading ours. A failure is left for the results.
void flush(PGconn* conn, const Deadline& deadline) {
  while (PQflush(conn) == 1) {
    wait_socket(conn, POLLIN | POLLOUT, deadline);
    if (PQconsumeInput(conn) == 0) return;
  }
}

// next_result() is PQgetResult without its unbounded wait: input is read as the socket has it
// until a result (or the end of the query's results, null) is ready.
ResultPtr next_result(PGconn* conn, const Deadline& deadline) {
  while (PQisBusy(conn) != 0) {
    // Older libpq reports a dropped connection as busy; PQgetResult fails it at once.
    if (PQstatus(conn) == CONNECTION_BAD) break;
    wait_socket(conn, POLLIN, deadline);
    // A failure that dropped the connection is PQgetResult's to report; one that did not
    // leaves nothing to wait on that is sure to end.
    if (PQconsumeInput(conn) == 0 && PQstatus(conn) != CONNECTION_BAD) {
      std::string message = PQerrorMessage(conn);
      std::replace_if(
          message.begin(), message.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
      while (!message.empty() && message.back() == ' ') message.pop_back();
      throw NoAnswer("reading the answer failed: " + message);
    }
  }
  return ResultPtr(PQgetResult(conn));
}

// is_copy() says whether `r` starts a COPY: libpq then hands out a COPY result on every call
// and never the null that ends a query's results.
bool is_copy(const PGresult* r) {
  const auto status = PQresultStatus(r);
  return status == PGRES_COPY_IN || status == PGRES_COPY_OUT || status == PGRES_COPY_BOTH;
}

// last_result() reads a query's results to their end and keeps the last, or the first error,
// as PQexec does; a COPY ends them too, as in PQexec (no statement here asks for one, so only a
// broken server or proxy sends it, and the caller reads it as the unexpected answer it is).
ResultPtr last_result(PGconn* conn, const Deadline& deadline) {
  ResultPtr kept;
  while (ResultPtr r = next_result(conn, deadline)) {
    if (is_copy(r.get())) return r;
    if (!kept || !is_error(kept.get())) kept = std::move(r);
  }
  return kept;
}

// round_trip() sends with `sent` (a PQsend… call's return), then waits for the answer.
ResultPtr round_trip(PGconn* conn, int sent, const Deadline& deadline) {
  if (sent != 1) return nullptr;
  flush(conn, deadline);
  return last_result(conn, deadline);
}

}  // namespace

Deadline Deadline::for_statement(std::chrono::milliseconds statement_timeout) {
  if (statement_timeout.count() == 0) return {SteadyClock::time_point::max(), statement_timeout};
  const std::chrono::milliseconds limit = statement_timeout + kAnswerMargin;
  return {SteadyClock::now() + limit, limit};
}

bool make_nonblocking(PGconn* conn) { return PQsetnonblocking(conn, 1) == 0; }

bool reusable(const ConnPtr& conn) {
  return PQstatus(conn.get()) == CONNECTION_OK && PQtransactionStatus(conn.get()) == PQTRANS_IDLE &&
         PQpipelineStatus(conn.get()) == PQ_PIPELINE_OFF;
}

std::string shared_session_hint(const PGresult* r) {
  const char* sqlstate = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  if (sqlstate == nullptr ||
      (std::strcmp(sqlstate, "26000") != 0 && std::strcmp(sqlstate, "42P05") != 0)) {
    return "";
  }
  return " (behind a pooler in transaction mode? add pool_mode=transaction to the URL, or set "
         "PostgresOptions::pool_mode)";
}

ResultPtr exec_text(PGconn* conn, const std::string& sql, const Deadline& deadline) {
  return round_trip(conn, PQsendQuery(conn, sql.c_str()), deadline);
}

ResultPtr prepare(PGconn* conn, const Statement& s, const Deadline& deadline) {
  return round_trip(
      conn,
      PQsendPrepare(conn, s.name, s.sql.c_str(), static_cast<int>(s.types.size()), s.types.data()),
      deadline);
}

ResultPtr exec_prepared(PGconn* conn, const Statement& s, const Params& p,
                        const Deadline& deadline) {
  return round_trip(
      conn, PQsendQueryPrepared(conn, s.name, p.size(), p.values(), p.lengths(), p.formats(), 1),
      deadline);
}

ResultPtr exec_unprepared(PGconn* conn, const Statement& s, const Params& p,
                          const Deadline& deadline) {
  return round_trip(conn,
                    PQsendQueryParams(conn, s.sql.c_str(), p.size(), s.types.data(), p.values(),
                                      p.lengths(), p.formats(), 1),
                    deadline);
}

ResultPtr exec_with_local_timeout(PGconn* conn, const Statement& s, const Params& p,
                                  std::chrono::milliseconds timeout, const Deadline& deadline) {
  if (timeout.count() == 0) return exec_unprepared(conn, s, p, deadline);
  const std::string ms = std::to_string(timeout.count());
  const char* value = ms.c_str();
  if (PQenterPipelineMode(conn) == 0) return nullptr;
  // Statements before one Sync share one implicit transaction; the server arms each
  // statement's timeout as it starts, so the second runs under the first's setting.
  const bool sent = PQsendQueryParams(conn, "SELECT set_config('statement_timeout', $1, true)", 1,
                                      nullptr, &value, nullptr, nullptr, 0) == 1 &&
                    PQsendQueryParams(conn, s.sql.c_str(), p.size(), s.types.data(), p.values(),
                                      p.lengths(), p.formats(), 1) == 1 &&
                    PQpipelineSync(conn) == 1;
  if (!sent) return nullptr;
  flush(conn, deadline);
  // The results come as: set_config's, a null; the statement's, a null; the Sync's. The
  // implicit transaction commits at the Sync, after the statement's result: an error there (a
  // serialization failure, a deferred constraint) comes after it, and until the Sync's result
  // the commit is not known to have happened. So the statement's result stands only once the
  // Sync's arrived with no error after it.
  ResultPtr setting;
  ResultPtr answer;
  ResultPtr at_commit;
  bool synced = false;
  int query = 0;
  // Nulls past the statement's without the Sync's would be a protocol this code does not know.
  constexpr int kLastNull = 4;
  while (query <= kLastNull) {
    ResultPtr r = next_result(conn, deadline);
    if (!r) {
      if (PQstatus(conn) != CONNECTION_OK) break;
      ++query;
      continue;
    }
    if (PQresultStatus(r.get()) == PGRES_PIPELINE_SYNC) {
      PQexitPipelineMode(conn);
      synced = true;
      break;
    }
    if (query == 0) {
      setting = std::move(r);
    } else if (query == 1) {
      answer = std::move(r);
    } else if (!at_commit) {
      at_commit = std::move(r);
    }
  }
  // A failed set_config aborts the pipeline: its error is the one to report.
  if (setting && PQresultStatus(setting.get()) != PGRES_TUPLES_OK) return setting;
  if (answer && PQresultStatus(answer.get()) != PGRES_TUPLES_OK &&
      PQresultStatus(answer.get()) != PGRES_COMMAND_OK) {
    return answer;
  }
  if (at_commit) return at_commit;
  // No Sync (the connection went): whether the transaction committed is unknown.
  if (!synced) return nullptr;
  return answer;
}

}  // namespace idempotency::postgres_detail
