// A waiter's side of PostgresLock: wait_for_change() LISTENs on a connection of its own and
// counts itself in the row's `waiters`, so the holder's complete notifies only when someone waits.
#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "common/notify_wait.h"
#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/postgres_lock.h"
#include "postgres_impl.h"
#include "postgres_internal.h"

namespace idempotency {

namespace {

// A slot among a bounded number, taken if one is free (a CAS, so the count never overshoots).
class Slot {
 public:
  Slot(std::atomic<std::size_t>& taken, std::size_t most) : taken_(taken) {
    std::size_t n = taken_.load();
    do {
      if (n >= most) return;
    } while (!taken_.compare_exchange_weak(n, n + 1));
    held_ = true;
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot() {
    if (held_) taken_.fetch_sub(1);
  }
  [[nodiscard]] bool held() const noexcept { return held_; }

 private:
  std::atomic<std::size_t>& taken_;
  bool held_ = false;
};

}  // namespace

// register_waiter() counts a waiter in the row's `waiters` on its listening connection,
// after its LISTEN: true when the record is a live claim that will notify, false when it is
// missing, done or lapsed (nothing will notify: claim again now).
bool PostgresLock::Impl::register_waiter(PGconn* conn, std::string_view key) {
  Params p;
  p.bytes(key);
  p.int8(now());
  const ResultPtr res = answered("registering a waiter", key, [&](const Deadline& d) {
    return postgres_detail::exec_unprepared(conn, sql.wait, p, d);
  });
  if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    throw StoreError("postgres: registering a waiter failed for key " + key_fingerprint(key) +
                     ": " + error_of(conn, res.get(), key));
  }
  postgres_detail::expect_shape(res.get(), "wait", 0, 1, {postgres_detail::kInt8Oid});
  return PQntuples(res.get()) == 1;
}

// unregister_waiter() undoes register_waiter(); a failure (no answer included: the listening
// connection is closed next anyway) only leaves the count high, which costs a NOTIFY, so it is
// not reported.
void PostgresLock::Impl::unregister_waiter(PGconn* conn, std::string_view key) noexcept {
  Params p;
  p.bytes(key);
  try {
    (void)postgres_detail::exec_unprepared(conn, sql.unwait, p, deadline());
  } catch (const StoreError&) {
    return;  // NoAnswer
  }
}

void PostgresLock::do_wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                                      const std::stop_token& stop) {
  if (!impl_->own_session()) {
    // A LISTEN would end with its transaction: sleep the slice, and once()'s next claim polls.
    impl_->waits.count(store_detail::WaitEnd::kPolled);
    LockBackend::do_wait_for_change(key, timeout, stop);
    return;
  }
  // A listener waits on its socket, so it is its own connection, not a pooled one; they are
  // bounded apart from the pool (a waiter must not take the connection its holder's complete
  // needs), and a wait that finds every one in use polls instead.
  const Slot slot(impl_->listeners, impl_->options.pool_size);
  if (!slot.held()) {
    impl_->waits.count(store_detail::WaitEnd::kPolled);
    LockBackend::do_wait_for_change(key, timeout, stop);
    return;
  }
  postgres_detail::ConnPtr listener;
  bool registered = false;
  bool lost = false;
  bool woken_early = false;
  const std::string wanted = key_fingerprint(key);
  // Reads what has arrived: true for this key's notification or a lost connection.
  auto ours = [&] {
    if (PQconsumeInput(listener.get()) == 0) {
      lost = true;  // connection lost: the next claim decides
      return true;
    }
    while (PGnotify* note = PQnotifies(listener.get())) {
      const bool mine = note->extra != nullptr && wanted == note->extra;
      PQfreemem(note);
      if (mine) return true;
    }
    return false;
  };
  const store_detail::WaitEnd end = store_detail::wait_for_notification(
      timeout, stop,
      [&]() -> std::optional<int> {
        listener = impl_->connect();
        // LISTEN before registering, so a complete that counts this waiter notifies a listener.
        // The registration need not be durable (a server crash ends the LISTEN with it), so the
        // waiter does not wait for a WAL flush.
        impl_->exec_simple(listener.get(),
                           "SET synchronous_commit = off; LISTEN " + impl_->sql.channel, "listen");
        registered = impl_->register_waiter(listener.get(), key);
        if (!registered) return std::nullopt;
        // A NOTIFY sent right after the registration committed may already sit in libpq's
        // buffer, read with the registration's reply: the socket would never signal it.
        if (ours()) {
          woken_early = true;
          return std::nullopt;
        }
        return PQsocket(listener.get());
      },
      ours,
      [&](std::chrono::milliseconds left) { LockBackend::do_wait_for_change(key, left, stop); });
  if (registered && !lost) impl_->unregister_waiter(listener.get(), key);
  if (lost) {
    impl_->waits.count(store_detail::WaitEnd::kUnavailable);
  } else {
    impl_->waits.count(woken_early ? store_detail::WaitEnd::kWoken : end);
  }
}

}  // namespace idempotency
