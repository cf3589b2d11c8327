// idem: the operator CLI for gcp-pubsub-idempotency stores.
//
// Inspects a key's record without printing the key, releases a stuck claim, purges expired
// records, and prints or applies the SQL schema. Exit codes are in exit_codes.h and --help.
// No output or error message contains a key or the backend URL.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "backend_url.h"
#include "commands.h"
#include "exit_codes.h"
#include "idempotency/backend_registry.h"
#include "idempotency/errors.h"
#include "key_input.h"

namespace {

using idempotency::cli::CliError;
using idempotency::cli::ExitCode;

constexpr const char* kFooter = R"(KEY
  The key as one argument, or - to read it from stdin (all of stdin, minus one trailing
  newline), which keeps it out of shell history and ps:  printf %s "$KEY" | idem inspect -
  A key that starts with - goes after --:  idem inspect -- -KEY
  Output and errors never show a key; key_fingerprint (12 hex digits of its SHA-256) does.

EXIT CODES
  0  ok
  1  store error (the store's own message, never the key)
  2  usage error (bad flag, URL or key; one line)
  3  no record for the key
  4  confirmation required (release without --yes; nothing changed)
  5  refused (release of a DONE record: it is not stuck, it expires with its ttl)
)";

// The registered backends with an SQL schema, for --help.
std::string sql_dialects() {
  std::string out;
  for (const auto* entry : idempotency::registered_backends()) {
    if (entry->schema) out += (out.empty() ? "" : " or ") + entry->schemes.front();
  }
  return out;
}

int fail(ExitCode code, const std::string& message) {
  std::cerr << "idem: " << idempotency::cli::one_line(message) << "\n";
  return static_cast<int>(code);
}

// CLI11's own messages can quote the offending argument, which may be a key or a URL with a
// password; only the kinds that quote nothing but option names are passed through.
int parse_failure(const CLI::ParseError& e) {
  const std::string kind = e.get_name();
  if (kind == "RequiredError" || kind == "ArgumentMismatch" || kind == "RequiresError" ||
      kind == "ExcludesError") {
    return fail(ExitCode::kUsage, std::string("usage: ") + e.what() + " (see idem --help)");
  }
  if (kind == "ConversionError" || kind == "ValidationError") {
    return fail(ExitCode::kUsage,
                "usage: an option has an invalid value (not shown; see idem --help)");
  }
  return fail(ExitCode::kUsage, "usage: the command line cannot be parsed (see idem --help)");
}

// Unknown options and surplus arguments are collected rather than rejected by CLI11, so the
// message can say where they are without echoing them.
std::optional<int> reject_extras(const CLI::App& app) {
  std::vector<std::string> extras = app.remaining(true);
  // With extras allowed CLI11 keeps the "--" separator among them; it is not an extra.
  std::erase(extras, std::string("--"));
  if (extras.empty()) return std::nullopt;
  return fail(ExitCode::kUsage,
              "usage: " + std::to_string(extras.size()) +
                  " unexpected argument(s) or unknown option(s), not shown since they may hold "
                  "a key; a key starting with - goes after -- (see idem --help)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"idem: inspect and repair gcp-pubsub-idempotency records", "idem"};
  app.footer(kFooter);
  app.allow_extras();
  app.fallthrough();
  app.require_subcommand(1);

  std::string backend_url;
  app.add_option("--backend", backend_url, "Backend URL: " + idempotency::backend_url_forms())
      ->envname("IDEMPOTENCY_BACKEND");

  std::string key_arg;
  auto* inspect = app.add_subcommand(
      "inspect", "Show a key's record: state, fence, lease and ttl times, token, result size");
  inspect->add_option("key", key_arg, "The key, or - to read it from stdin")->required();

  bool yes = false;
  auto* release = app.add_subcommand(
      "release", "Break-glass: release a stuck CLAIMED record so the next delivery reclaims it");
  release->add_option("key", key_arg, "The key, or - to read it from stdin")->required();
  release->add_flag("--yes", yes, "Do it (without: print what would be done, exit 4)");

  auto* purge = app.add_subcommand("purge-expired", "Delete records past their expires_at");

  std::optional<std::string> dialect;
  std::optional<std::string> table;
  auto* schema = app.add_subcommand(
      "schema", "Print the SQL DDL for --backend, or for --dialect/--table with no database");
  auto* dialect_opt =
      schema->add_option("--dialect", dialect, sql_dialects() + " (instead of --backend)");
  schema->add_option("--table", table, "Table name for --dialect (default idempotency_records)")
      ->needs(dialect_opt);

  auto* migrate =
      app.add_subcommand("migrate", "Create the table and its index in the SQL --backend (" +
                                        sql_dialects() + ") if missing");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return parse_failure(e);
  }
  if (auto code = reject_extras(app)) return *code;

  try {
    const auto need_backend = [&] {
      if (backend_url.empty()) {
        throw idempotency::cli::usage_error(
            "usage: --backend URL (or IDEMPOTENCY_BACKEND) is required");
      }
    };
    ExitCode code = ExitCode::kOk;
    if (*schema) {
      code = idempotency::cli::run_schema({backend_url, dialect, table}, std::cout);
    } else {
      need_backend();
      if (*inspect) {
        code = idempotency::cli::run_inspect(
            backend_url, idempotency::cli::read_key(key_arg, std::cin), std::cout);
      } else if (*release) {
        code = idempotency::cli::run_release(
            backend_url, idempotency::cli::read_key(key_arg, std::cin), yes, std::cout);
      } else if (*purge) {
        code = idempotency::cli::run_purge_expired(backend_url, std::cout);
      } else if (*migrate) {
        code = idempotency::cli::run_migrate(backend_url, std::cout);
      }
    }
    std::cout.flush();
    return static_cast<int>(code);
  } catch (const CliError& e) {
    std::cout.flush();
    return fail(e.code(), e.what());
  } catch (const idempotency::NotInspectable& e) {
    return fail(ExitCode::kUsage, e.what());
  } catch (const idempotency::StoreError& e) {
    std::cout.flush();
    return fail(ExitCode::kStoreError, std::string("store error: ") + e.what());
  } catch (const std::invalid_argument& e) {
    // The library's argument errors name the problem, never the key or the URL.
    return fail(ExitCode::kUsage, std::string("usage: ") + e.what());
  } catch (const std::exception& e) {
    return fail(ExitCode::kStoreError, std::string("error: ") + e.what());
  }
}
