// Admin: a plain libpq connection the PostgreSQL tests use to poke the server behind the
// backend (lock a table, count connections, end them, read session settings).
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace idempotency::testing {

struct PgConnDeleter {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
struct PgResultDeleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};

class Admin {
 public:
  explicit Admin(const std::string& url) : conn_(PQconnectdb(url.c_str())) {
    if (PQstatus(conn_.get()) != CONNECTION_OK) {
      throw std::runtime_error(std::string("admin connect: ") + PQerrorMessage(conn_.get()));
    }
  }
  /// exec() runs `sql` and returns the first value of the last result ("" when none).
  std::string exec(const std::string& sql) {
    std::unique_ptr<PGresult, PgResultDeleter> r(PQexec(conn_.get(), sql.c_str()));
    const auto status = PQresultStatus(r.get());
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
      throw std::runtime_error("admin exec: " + std::string(PQresultErrorMessage(r.get())));
    }
    if (status == PGRES_TUPLES_OK && PQntuples(r.get()) > 0) return PQgetvalue(r.get(), 0, 0);
    return "";
  }
  /// terminate() ends every server process of the application `name`; returns how many.
  int terminate(const std::string& name) {
    return std::stoi(
        exec("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
             "application_name = '" +
             name + "' AND pid <> pg_backend_pid()"));
  }
  /// connections() counts the server processes of the application `name`.
  int connections(const std::string& name) {
    return std::stoi(
        exec("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + name + "'"));
  }

 private:
  std::unique_ptr<PGconn, PgConnDeleter> conn_;
};

}  // namespace idempotency::testing
