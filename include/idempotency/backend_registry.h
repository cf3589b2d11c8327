// The backend registry: the one list of backends, which `open_backend()`, the gateway and the
// `idem` CLI all read. Each backend built into this installation is registered before first
// use (its entry lives in src/backends/<name>/<name>_entry.cc); a program may register its own
// backend too, and it is then reachable by URL everywhere a backend URL is accepted.
//
//   idempotency::register_backend({
//       .schemes = {"tikv"},
//       .url_form = "tikv://HOST:PORT",
//       .open = [](idempotency::BackendUrl& url, const idempotency::BackendOptions& options) {
//         url.refuse_rest("tikv backend URL takes no parameters");
//         return std::make_unique<TikvLock>(url.location(), options);
//       }});
//
// Thread safety: every function here may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/backend.h"
#include "idempotency/backend_url.h"

namespace idempotency {

/// BackendEntry is one backend as the registry knows it: how a URL opens it and what else a
/// tool may ask of it. Fill with designated initializers; only `schemes` and `open` are needed.
struct BackendEntry {
  /// The URL schemes it answers; the first names it ("postgres", then "postgresql").
  std::vector<std::string> schemes;
  /// The URL's shape, for help texts, e.g. "sqlite:///PATH[?table=NAME]".
  std::string url_form;
  /// Builds the backend `url` names (its scheme is one of `schemes`). Takes the parameters it
  /// reads and refuses the rest with a one-line `std::invalid_argument` that never repeats the
  /// URL; throws `StoreError` when the store cannot be reached.
  std::function<std::unique_ptr<LockBackend>(BackendUrl& url, const BackendOptions& options)> open;
  /// Optional: as `open`, but fails with `StoreError` instead of creating a store that does not
  /// exist yet (an operator's tool must not make an empty database by a typo). Unset: `open`.
  std::function<std::unique_ptr<LockBackend>(BackendUrl& url)> open_existing;
  /// Optional, SQL stores: the DDL for the table `url` names, made without connecting (`url`
  /// may have no location). Throws `std::invalid_argument` for a bad table name or parameter.
  std::function<std::string(BackendUrl& url)> schema;
  /// Optional, SQL stores: creates the table `url` names where it is missing and says what it
  /// did, for an operator. Throws as `open` does.
  std::function<std::string(BackendUrl& url)> migrate;
};

/// register_backend() makes `entry` reachable by its schemes. Throws `std::invalid_argument`
/// when it has no scheme or no `open`, or a scheme is taken already.
void register_backend(BackendEntry entry);

/// find_backend() returns the entry for `scheme`, or nullptr when none is registered. The
/// entry lives as long as the process.
[[nodiscard]] const BackendEntry* find_backend(std::string_view scheme);

/// backend_for() returns the entry for `url`'s scheme. Throws `std::invalid_argument` naming
/// the registered schemes when there is none.
[[nodiscard]] const BackendEntry& backend_for(const BackendUrl& url);

/// registered_backends() lists the entries, the built-in ones first, in registration order.
[[nodiscard]] std::vector<const BackendEntry*> registered_backends();

/// backend_url_forms() joins the registered backends' `url_form`s with ", ", for help texts.
[[nodiscard]] std::string backend_url_forms();

/// take_table() takes the `table=NAME` parameter the SQL backends share (nullopt when absent).
/// Throws `std::invalid_argument` for an empty name.
[[nodiscard]] std::optional<std::string> take_table(BackendUrl& url);

}  // namespace idempotency
