// purge_expired() for DatastoreLock: pages through a keys-only query of the expired keys and
// deletes them in small transactions that re-check each record, passing over entities in the
// kind that are not records.
#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datastore_impl.h"
#include "datastore_wire.h"
#include "idempotency/errors.h"
#include "idempotency/log.h"

namespace idempotency {
namespace {

using Json = nlohmann::json;
using datastore_detail::format_timestamp;
using datastore_detail::record_from_entity;

}  // namespace

std::size_t DatastoreLock::Impl::delete_expired(const std::vector<std::string>& names, Millis at,
                                                std::size_t& foreign) {
  if (names.empty()) return 0;
  const std::vector<std::string_view> secrets(names.begin(), names.end());
  std::size_t skipped = 0;
  const std::size_t deleted = in_transaction(
      "purge_expired", secrets, [&](const std::string& tx, bool& committing) -> std::size_t {
        skipped = 0;
        auto found = lookup(names, tx);
        Json mutations = Json::array();
        for (const auto& [name, entity] : found) {
          Millis expires_at = 0;
          try {
            expires_at = record_from_entity(entity).expires_at;
          } catch (const StoreError&) {
            ++skipped;
            continue;
          }
          // Re-checked in the transaction: a record reclaimed since the query must stay.
          if (at >= expires_at) mutations.push_back({{"delete", key_json(name)}});
        }
        if (mutations.empty()) {
          rollback(tx);
          return 0;
        }
        const std::size_t n = mutations.size();
        committing = true;
        commit(tx, std::move(mutations));
        return n;
      });
  foreign += skipped;
  return deleted;
}

void DatastoreLock::Impl::log_foreign(std::size_t count) {
  if (count == 0 || foreign_logged.exchange(true)) return;
  log(LogRecord{Severity::kWarning,
                "purge_skipped_foreign",
                "the record kind holds entities that are not this library's records; "
                "purge_expired() leaves them alone (said once per backend)",
                {{"kind", options.kind}, {"entities", std::to_string(count)}}});
}

std::size_t DatastoreLock::Impl::purge() {
  const Millis at = now();
  std::size_t purged = 0;
  std::size_t foreign = 0;
  std::string cursor;
  int stalled = 0;
  for (;;) {
    Json query = {{"kind", Json::array({Json{{"name", options.kind}}})},
                  {"projection", Json::array({Json{{"property", {{"name", "__key__"}}}}})},
                  {"filter",
                   {{"propertyFilter",
                     {{"property", {{"name", "expires_at"}}},
                      {"op", "LESS_THAN_OR_EQUAL"},
                      {"value", {{"timestampValue", format_timestamp(at)}}}}}}},
                  {"limit", options.purge_batch_size}};
    if (!cursor.empty()) query["startCursor"] = cursor;
    Json b = body();
    b["partitionId"] = partition();
    b["query"] = query;
    const Json r = with_retries("purge_expired", {}, [&] { return call("runQuery", b); });
    std::vector<std::string> names;
    std::string more;
    std::string end;
    try {
      const Json& batch = r.at("batch");
      if (batch.contains("entityResults")) {
        for (const auto& er : batch["entityResults"]) {
          // A record's key is one named element of this kind; any other (an id, a parent)
          // is another program's entity.
          const Json& path = er.at("entity").at("key").at("path");
          if (path.size() == 1 && path[0].value("kind", "") == options.kind &&
              path[0].contains("name") && path[0]["name"].is_string()) {
            names.push_back(path[0]["name"].get<std::string>());
          } else {
            ++foreign;
          }
        }
      }
      more = batch.value("moreResults", "");
      end = batch.value("endCursor", "");
    } catch (const Json::exception&) {
      throw StoreError("datastore: purge_expired: a malformed runQuery reply");
    }
    for (std::size_t i = 0; i < names.size(); i += kPurgeTransactionEntities) {
      const auto first = names.begin() + static_cast<std::ptrdiff_t>(i);
      const auto last = names.begin() + static_cast<std::ptrdiff_t>(
                                            std::min(names.size(), i + kPurgeTransactionEntities));
      purged += delete_expired(std::vector<std::string>(first, last), at, foreign);
    }
    if (more == "NO_MORE_RESULTS") break;
    if (more != "NOT_FINISHED" && more != "MORE_RESULTS_AFTER_LIMIT" &&
        more != "MORE_RESULTS_AFTER_CURSOR") {
      throw StoreError("datastore: purge_expired: runQuery answered moreResults \"" + more + "\"");
    }
    if (end.empty()) {
      throw StoreError("datastore: purge_expired: runQuery answered " + more +
                       " without an endCursor");
    }
    if (end == cursor) {
      if (++stalled == kMaxStalledBatches) {
        throw StoreError("datastore: purge_expired: the query did not advance in " +
                         std::to_string(kMaxStalledBatches) + " batches");
      }
    } else {
      stalled = 0;
    }
    cursor = std::move(end);
  }
  log_foreign(foreign);
  return purged;
}

}  // namespace idempotency
