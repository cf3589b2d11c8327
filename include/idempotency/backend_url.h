// BackendUrl: a backend URL taken apart once, `SCHEME://LOCATION[?NAME=VALUE&…]`, for the
// backend registry, the `idem` CLI and every backend that reads parameters, so none of them
// splits a query string of its own.
//
// Parameter names and values are kept as written (no percent-decoding): each backend decides
// what its location and values mean. No message built here contains the URL, which may hold a
// password.
//
// Thread safety: a value type; const member functions may be called from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idempotency {

/// One query parameter, as written: `name=value` (a parameter without '=' has an empty value).
struct UrlParameter {
  std::string name;
  std::string value;

  friend bool operator==(const UrlParameter&, const UrlParameter&) = default;
};

/// BackendUrl is a URL split into scheme, location and the query parameters not yet taken.
class BackendUrl {
 public:
  /// parse() splits `url` at the first "://" and the first '?' after it. Empty parameters
  /// ("a=1&&b=2") are skipped. Throws `std::invalid_argument` when there is no "://".
  [[nodiscard]] static BackendUrl parse(std::string_view url);

  /// BackendUrl() assembles a URL from its parts, for a tool that knows no location (e.g. the
  /// scheme and a table only).
  explicit BackendUrl(std::string scheme, std::string location = {},
                      std::vector<UrlParameter> parameters = {});

  /// scheme() is the part before "://", e.g. "postgres".
  [[nodiscard]] const std::string& scheme() const noexcept { return scheme_; }
  /// location() is the part between "://" and '?', e.g. "user:password@host/db" or "/var/x.db".
  [[nodiscard]] const std::string& location() const noexcept { return location_; }
  /// parameters() are the parameters not taken yet, in the order written.
  [[nodiscard]] const std::vector<UrlParameter>& parameters() const noexcept { return parameters_; }

  /// take() removes every parameter called `name` and returns the last one's value, or nullopt
  /// when there is none.
  [[nodiscard]] std::optional<std::string> take(std::string_view name);

  /// refuse_rest() throws `std::invalid_argument(message)` when a parameter is left untaken:
  /// a backend calls it after taking those it knows, so a misspelt one is never ignored.
  void refuse_rest(std::string_view message) const;

  /// str() reassembles `SCHEME://LOCATION[?remaining parameters]`, e.g. to hand a PostgreSQL
  /// URL without the parameters the library took to libpq.
  [[nodiscard]] std::string str() const;

 private:
  std::string scheme_;
  std::string location_;
  std::vector<UrlParameter> parameters_;
};

}  // namespace idempotency
