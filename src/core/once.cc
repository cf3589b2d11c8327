// The engine behind once(): in-process single-flight over the cross-process record.
//
// A process-wide table maps (backend, key) to the calls that own it here: at most one
// `once` flight (joinable: later callers wait on it) and any number of lock/mutex guards (not
// joinable; registered only so a thread asking for a key it already owns is caught). The table
// is split into shards by key, each with its own mutex, so calls on different keys do not queue
// for one process-wide lock. Lock order is always table shard, then flight.
#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/guard.h"
#include "idempotency/key.h"
#include "idempotency/once.h"
#include "once_claim.h"

namespace idempotency {

const char* status_name(Status s) noexcept {
  switch (s) {
    case Status::kExecuted:
      return "executed";
    case Status::kJoined:
      return "joined";
    case Status::kReplayed:
      return "replayed";
    case Status::kDuplicate:
      return "duplicate";
    case Status::kInProgress:
      return "in_progress";
  }
  return "unknown";
}

namespace detail {
namespace {

struct Flight {
  enum class Phase { kRunning, kFinished, kHandoff };
  std::mutex mutex;
  // Made by the first caller that blocks on the flight, under its mutex: a condition variable
  // that takes a stop token is an allocation, and nearly every flight ends unjoined.
  std::optional<std::condition_variable_any> cv;
  Phase phase = Phase::kRunning;
  std::thread::id owner = std::this_thread::get_id();
  std::type_index type = typeid(void);
  std::size_t waiters = 0;
  // Joined callers without a thread to block (begin_async_flight()); told once when it ends.
  std::vector<JoinCallback> async_waiters;
  // Set by AsyncFlight::decide(): what a caller joining from then on is answered at once.
  std::optional<ErasedOutcome> decided;
  std::exception_ptr error;
  ErasedOutcome outcome;
};

// The asynchronous flight whose operation this thread is running (RunningFlight), if any.
thread_local const void* running_async_flight = nullptr;

struct Entry {
  std::shared_ptr<Flight> flight;
  std::vector<std::pair<std::uint64_t, std::thread::id>> guards;
};

struct TableKey {
  TableKey(const LockBackend* b, std::string k)
      : backend(b),
        key(std::move(k)),
        hash(std::hash<std::string>{}(key) ^ (std::hash<const void*>{}(backend) << 1U)) {}
  const LockBackend* backend;
  std::string key;
  // Hashed once: a call finds its shard and its entry, and finds the entry again as it ends.
  std::size_t hash;
  bool operator==(const TableKey& other) const {
    return backend == other.backend && key == other.key;
  }
};

struct TableKeyHash {
  std::size_t operator()(const TableKey& k) const noexcept { return k.hash; }
};

// One shard of the table: every call on a key works in the key's shard only. A cache line
// or more each, so that two shards' mutexes never share one.
class alignas(64) Table {
 public:
  // Shards enough that threads on different keys rarely meet, on 2 cores or 64.
  static constexpr std::size_t kShards = 64;

  // for_key() returns the shard that holds `k`.
  static Table& for_key(const TableKey& k) {
    static std::array<Table, kShards> shards;
    return shards[TableKeyHash{}(k) % kShards];
  }

  std::mutex mutex;
  std::unordered_map<TableKey, Entry, TableKeyHash> entries;
  std::uint64_t next_guard_id = 1;

  // Requires `mutex`. Throws ReentryError when this thread owns the key through any call.
  void check_reentry(const Entry& entry, std::string_view key) {
    const auto me = std::this_thread::get_id();
    if (entry.flight && entry.flight.get() == running_async_flight) {
      throw ReentryError(std::string(key));
    }
    if (entry.flight) {
      std::lock_guard fl(entry.flight->mutex);
      if (entry.flight->owner == me) throw ReentryError(std::string(key));
    }
    for (const auto& [id, thread] : entry.guards) {
      if (thread == me) throw ReentryError(std::string(key));
    }
  }

  // Requires `mutex`. Returns the entry of `k` (made if absent) for a call from this thread;
  // throws ReentryError, leaving no empty entry behind, when this thread owns the key already.
  Entry& entry_for_call(const TableKey& k, std::string_view key) {
    Entry& entry = entries[k];
    try {
      check_reentry(entry, key);
    } catch (...) {
      erase_if_empty(k);
      throw;
    }
    return entry;
  }

  // Requires `mutex` and the flight's mutex: marks `flight` finished with `error` (or the
  // outcome already set) and takes it out of the table, so the next caller starts afresh.
  void retire(const TableKey& k, Flight& flight, std::exception_ptr error) {
    flight.phase = Flight::Phase::kFinished;
    flight.error = std::move(error);
    auto it = entries.find(k);
    if (it != entries.end() && it->second.flight.get() == &flight) it->second.flight.reset();
    erase_if_empty(k);
  }

  // Requires `mutex`.
  void erase_if_empty(const TableKey& k) {
    auto it = entries.find(k);
    if (it != entries.end() && !it->second.flight && it->second.guards.empty()) entries.erase(it);
  }
};

// Unregisters a guard's ownership when the guard finishes.
struct GuardRegistration {
  GuardRegistration(TableKey k, std::uint64_t i) : key(std::move(k)), id(i) {}
  GuardRegistration(const GuardRegistration&) = delete;
  GuardRegistration& operator=(const GuardRegistration&) = delete;
  TableKey key;
  std::uint64_t id;
  ~GuardRegistration() {
    Table& table = Table::for_key(key);
    std::lock_guard lock(table.mutex);
    auto it = table.entries.find(key);
    if (it == table.entries.end()) return;
    std::erase_if(it->second.guards, [this](const auto& g) { return g.first == id; });
    table.erase_if_empty(key);
  }
};

// What a joined caller receives of the owner's outcome: an execution is, for it, a join.
ErasedOutcome as_joined(ErasedOutcome outcome) {
  if (outcome.status == Status::kExecuted) outcome.status = Status::kJoined;
  return outcome;
}

// Publishes the owner's outcome to the joined callers and retires the flight.
void finish(const TableKey& k, const std::shared_ptr<Flight>& flight, std::exception_ptr error,
            ErasedOutcome outcome) {
  Table& table = Table::for_key(k);
  std::vector<JoinCallback> waiting;
  bool blocked = false;  // a caller waits on the condition variable, or did
  {
    std::lock_guard tl(table.mutex);
    std::lock_guard fl(flight->mutex);
    flight->outcome = std::move(outcome);
    table.retire(k, *flight, std::move(error));
    waiting.swap(flight->async_waiters);
    blocked = flight->cv.has_value();
  }
  if (blocked) flight->cv->notify_all();
  // Outside the locks: a callback may start another flight. The flight is finished, so
  // nothing changes these fields any more.
  const ErasedOutcome joined = as_joined(flight->outcome);
  for (auto& callback : waiting) {
    if (flight->error) {
      callback(std::nullopt, flight->error);
    } else {
      callback(joined, nullptr);
    }
  }
}

// The owner was cancelled: one waiting joiner takes over; with none, the flight ends.
void hand_off(const TableKey& k, const std::shared_ptr<Flight>& flight) {
  Table& table = Table::for_key(k);
  std::vector<JoinCallback> waiting;
  bool blocked = false;  // a caller waits on the condition variable, or did
  {
    std::lock_guard tl(table.mutex);
    std::lock_guard fl(flight->mutex);
    // A decision taken before the owner went is not the next owner's: arrivals join it.
    flight->decided.reset();
    if (flight->waiters > 0) {
      flight->phase = Flight::Phase::kHandoff;
      flight->owner = std::thread::id();
    } else {
      table.retire(k, *flight, std::make_exception_ptr(Cancelled()));
    }
    waiting.swap(flight->async_waiters);
    blocked = flight->cv.has_value();
  }
  if (blocked) flight->cv->notify_all();
  // The owner's cancellation is not theirs: they start over (and join whoever takes over).
  for (auto& callback : waiting) callback(std::nullopt, nullptr);
}

ErasedOutcome run_as_owner(const TableKey& k, const std::shared_ptr<Flight>& flight,
                           LockBackend& backend, const OnceOptions& options,
                           const OnceHooks& hooks) {
  ErasedOutcome outcome;
  try {
    outcome = claim_and_execute(k.key, backend, options, hooks);
  } catch (const Cancelled&) {
    // Handed off only when the owner was cancelled, which is not its joiners' business. A
    // Cancelled the operation threw on its own (a nested call's, say) is its failure, and the
    // joiners receive it as they receive any.
    if (options.stop.stop_requested()) {
      hand_off(k, flight);
    } else {
      finish(k, flight, std::current_exception(), {});
    }
    throw;
  } catch (...) {
    finish(k, flight, std::current_exception(), {});
    throw;
  }
  finish(k, flight, nullptr, outcome);
  return outcome;
}

}  // namespace

ErasedOutcome run_once(std::string_view key, LockBackend& backend, const OnceOptions& options,
                       const OnceHooks& hooks) {
  validate_key(key);
  validate_heartbeat(options.heartbeat, options.lease);
  if (options.stop.stop_requested()) throw Cancelled();
  const TableKey k{&backend, std::string(key)};
  Table& table = Table::for_key(k);
  std::shared_ptr<Flight> flight;
  {
    std::unique_lock tl(table.mutex);
    Entry& entry = table.entry_for_call(k, key);
    if (!entry.flight) {
      entry.flight = std::make_shared<Flight>();
      entry.flight->type = hooks.type;
      flight = entry.flight;
    } else {
      flight = entry.flight;
      std::unique_lock fl(flight->mutex);
      if (flight->type != hooks.type) {
        throw std::logic_error("once: one key used with two different result types");
      }
      ++flight->waiters;
      // Join: wait for the owner's outcome, or take over if the owner is cancelled.
      if (!flight->cv) flight->cv.emplace();
      while (true) {
        tl.unlock();  // never wait while holding the table
        const bool settled = flight->cv->wait(
            fl, options.stop, [&] { return flight->phase != Flight::Phase::kRunning; });
        fl.unlock();
        tl.lock();  // re-take in the table -> flight order
        fl.lock();
        if (!settled && flight->phase == Flight::Phase::kRunning) {
          --flight->waiters;
          throw Cancelled();  // only this caller; the shared execution goes on
        }
        if (flight->phase == Flight::Phase::kFinished) {
          --flight->waiters;
          if (flight->error) std::rethrow_exception(flight->error);
          return as_joined(flight->outcome);
        }
        if (flight->phase == Flight::Phase::kHandoff) {
          --flight->waiters;
          if (options.stop.stop_requested()) {
            std::vector<JoinCallback> starting_over;
            if (flight->waiters == 0) {
              table.retire(k, *flight, std::make_exception_ptr(Cancelled()));
              // Asynchronous callers that joined the handed-off flight start over, as
              // hand_off() tells them: retired without a word, they would never hear again.
              starting_over.swap(flight->async_waiters);
            }
            fl.unlock();
            tl.unlock();
            for (auto& callback : starting_over) callback(std::nullopt, nullptr);
            throw Cancelled();
          }
          flight->phase = Flight::Phase::kRunning;
          flight->owner = std::this_thread::get_id();
          break;  // this caller is the new owner
        }
      }
    }
  }
  return run_as_owner(k, flight, backend, options, hooks);
}

namespace {

// AsyncFlight's one kind: the flight, and the key as the table holds it (its node's, which
// lives while the flight is the entry's: until finish() or hand_off() retires it).
class OwnedAsyncFlight final : public AsyncFlight {
 public:
  OwnedAsyncFlight(const TableKey& key, std::shared_ptr<Flight> flight)
      : key_(key), flight_(std::move(flight)) {}
  ~OwnedAsyncFlight() override {
    if (!ended_) hand_off(key_, flight_);
  }
  OwnedAsyncFlight(const OwnedAsyncFlight&) = delete;
  OwnedAsyncFlight& operator=(const OwnedAsyncFlight&) = delete;

  const TableKey& key_;
  std::shared_ptr<Flight> flight_;
  bool ended_ = false;
};

OwnedAsyncFlight& owned(AsyncFlight& flight) { return static_cast<OwnedAsyncFlight&>(flight); }

}  // namespace

RunningFlight::RunningFlight(const AsyncFlight* flight) noexcept
    : flight_(flight != nullptr ? static_cast<const OwnedAsyncFlight*>(flight)->flight_ : nullptr),
      previous_(running_async_flight) {
  if (flight_) running_async_flight = flight_.get();
}

RunningFlight::~RunningFlight() { running_async_flight = previous_; }

void AsyncFlight::decide(const ErasedOutcome& executed) noexcept {
  OwnedAsyncFlight& self = owned(*this);
  if (self.ended_) return;
  const std::shared_ptr<Flight>& flight = self.flight_;
  std::vector<JoinCallback> waiting;
  {
    std::lock_guard fl(flight->mutex);
    // As outcome_of_done() reads the record once the write lands: the stored value, replayed.
    flight->decided = ErasedOutcome{Status::kReplayed, executed.value, 0, std::nullopt};
    waiting.swap(flight->async_waiters);
  }
  // Outside the lock, as finish() tells them: a callback may start another flight.
  const ErasedOutcome joined = as_joined(executed);
  for (auto& callback : waiting) callback(joined, nullptr);
}

void AsyncFlight::settle(ErasedOutcome outcome) noexcept {
  OwnedAsyncFlight& self = owned(*this);
  if (self.ended_) return;
  self.ended_ = true;
  finish(self.key_, self.flight_, nullptr, std::move(outcome));
}

void AsyncFlight::fail(std::exception_ptr error) noexcept {
  OwnedAsyncFlight& self = owned(*this);
  if (self.ended_) return;
  self.ended_ = true;
  finish(self.key_, self.flight_, std::move(error), {});
}

std::unique_ptr<AsyncFlight> begin_async_flight(std::string_view key, const LockBackend& backend,
                                                std::type_index type, JoinCallback on_joined) {
  validate_key(key);
  TableKey k{&backend, std::string(key)};
  Table& table = Table::for_key(k);
  std::unique_lock lock(table.mutex);
  // The key moved into the table's node, which the flight refers to, not copied.
  const auto node = table.entries.try_emplace(std::move(k)).first;
  Entry& entry = node->second;
  if (entry.flight) {
    std::optional<ErasedOutcome> decided;
    {
      std::lock_guard fl(entry.flight->mutex);
      if (entry.flight->type != type) {
        throw std::logic_error("once: one key used with two different result types");
      }
      if (!entry.flight->decided) {
        entry.flight->async_waiters.push_back(std::move(on_joined));
        return nullptr;
      }
      decided = entry.flight->decided;
    }
    lock.unlock();  // the callback may begin another flight
    on_joined(std::move(decided), nullptr);
    return nullptr;
  }
  entry.flight = std::make_shared<Flight>();
  entry.flight->type = type;
  // No thread owns it: a thread that asks for the key meanwhile joins instead of being taken
  // for a re-entry.
  entry.flight->owner = std::thread::id();
  return std::make_unique<OwnedAsyncFlight>(node->first, entry.flight);
}

std::shared_ptr<void> register_guard(const LockBackend& backend, std::string_view key) {
  TableKey k{&backend, std::string(key)};
  Table& table = Table::for_key(k);
  std::lock_guard lock(table.mutex);
  Entry& entry = table.entry_for_call(k, key);
  const std::uint64_t id = table.next_guard_id++;
  // What allocates comes before the guard is entered: a failure after it would leave this
  // thread marked as the key's holder for good (a ReentryError on every later call).
  std::shared_ptr<GuardRegistration> registration;
  try {
    entry.guards.reserve(entry.guards.size() + 1);
    registration = std::make_shared<GuardRegistration>(k, id);
  } catch (...) {
    table.erase_if_empty(k);
    throw;
  }
  entry.guards.emplace_back(id, std::this_thread::get_id());  // reserved: cannot throw
  return registration;
}

}  // namespace detail
}  // namespace idempotency
