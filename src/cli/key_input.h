// Reading the key a command works on: from the command line, or from stdin with `-`, so a
// key stays out of shell history and `ps`.
//
// Thread safety: reads stdin; call from one thread.
#pragma once

#include <istream>
#include <string>

namespace idempotency::cli {

/// read_key() returns `argument`, or for "-" the whole of `in` minus one trailing newline
/// ("\n" or "\r\n"). Throws a usage CliError for an empty or over-long key; the message never
/// contains the key.
[[nodiscard]] std::string read_key(const std::string& argument, std::istream& in);

}  // namespace idempotency::cli
