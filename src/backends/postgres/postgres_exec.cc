// The ways PostgresLock sends a statement: prepared (a session of its own), or whole with a
// transaction-local statement_timeout (a session a transaction-mode pooler shares); and what
// a connection's state says about reusing it.
#include <libpq-fe.h>

#include <chrono>
#include <cstring>
#include <string>

#include "postgres_internal.h"

namespace idempotency::postgres_detail {

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

ResultPtr exec_prepared(PGconn* conn, const Statement& s, const Params& p) {
  return ResultPtr(PQexecPrepared(conn, s.name, p.size(), p.values(), p.lengths(), p.formats(), 1));
}

ResultPtr exec_unprepared(PGconn* conn, const Statement& s, const Params& p) {
  return ResultPtr(PQexecParams(conn, s.sql.c_str(), p.size(), s.types.data(), p.values(),
                                p.lengths(), p.formats(), 1));
}

ResultPtr exec_with_local_timeout(PGconn* conn, const Statement& s, const Params& p,
                                  std::chrono::milliseconds timeout) {
  if (timeout.count() == 0) return exec_unprepared(conn, s, p);
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
    ResultPtr r(PQgetResult(conn));
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
