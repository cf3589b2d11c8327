#include "idempotency/backend_registry.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "built_in_backends.h"

namespace idempotency {
namespace {

class Registry {
 public:
  Registry() {
    for (auto& entry : registry_detail::built_in_backends()) add(std::move(entry));
  }

  void add(BackendEntry entry) {
    if (entry.schemes.empty() || !entry.open) {
      throw std::invalid_argument("a backend entry needs a scheme and an open function");
    }
    const std::lock_guard lock(mutex_);
    for (const auto& scheme : entry.schemes) {
      if (find_locked(scheme) != nullptr) {
        throw std::invalid_argument("backend scheme '" + scheme + "' is registered already");
      }
    }
    entries_.push_back(std::move(entry));
  }

  const BackendEntry* find(std::string_view scheme) const {
    const std::lock_guard lock(mutex_);
    return find_locked(scheme);
  }

  std::vector<const BackendEntry*> all() const {
    const std::lock_guard lock(mutex_);
    std::vector<const BackendEntry*> out;
    out.reserve(entries_.size());
    for (const auto& entry : entries_) out.push_back(&entry);
    return out;
  }

 private:
  const BackendEntry* find_locked(std::string_view scheme) const {
    for (const auto& entry : entries_) {
      if (std::find(entry.schemes.begin(), entry.schemes.end(), scheme) != entry.schemes.end()) {
        return &entry;
      }
    }
    return nullptr;
  }

  mutable std::mutex mutex_;
  std::deque<BackendEntry> entries_;  // a deque never moves an entry: pointers stay valid
};

Registry& registry() {
  static Registry instance;
  return instance;
}

std::string names() {
  std::string out;
  for (const auto* entry : registry().all()) {
    out += (out.empty() ? "" : ", ") + entry->schemes.front();
  }
  return out;
}

}  // namespace

void register_backend(BackendEntry entry) { registry().add(std::move(entry)); }

const BackendEntry* find_backend(std::string_view scheme) { return registry().find(scheme); }

const BackendEntry& backend_for(const BackendUrl& url) {
  if (const auto* entry = find_backend(url.scheme())) return *entry;
  // The scheme is cut short: a URL without "://" where expected could put a password here.
  throw std::invalid_argument("backend URL scheme '" + url.scheme().substr(0, 16) +
                              "' is not built in; built in: " + names());
}

std::vector<const BackendEntry*> registered_backends() { return registry().all(); }

std::string backend_url_forms() {
  std::string out;
  for (const auto* entry : registry().all()) {
    if (!entry->url_form.empty()) out += (out.empty() ? "" : ", ") + entry->url_form;
  }
  return out;
}

std::optional<std::string> take_table(BackendUrl& url) {
  auto table = url.take("table");
  if (table && table->empty()) throw std::invalid_argument("backend URL: table= needs a name");
  return table;
}

}  // namespace idempotency
