// ConnectionPool<Connection>: the bounded pool of store connections that the PostgreSQL and
// Redis backends share, so both wait for a free connection the same way and give up the same
// way (they had drifted: one timed out, the other waited forever). Waiters are served first
// come, first served: a returned connection is handed to the longest waiter, never left for
// the returning thread to take straight back (with 64 threads on 8 connections that barging
// gave Redis half its 8-thread rate and a 75 ms p99; BENCHMARKS.md, Stores). Internal: never
// installed, header-only because it is a template over the driver's handle, and free of any driver
// so that its unit test runs under TSan with the core's.
//
// `Connection` is an owning, pointer-like handle (a `std::unique_ptr` with the driver's
// deleter): default-constructible as empty, movable, with `get()`.
//
// Thread safety: every member is safe from any number of threads. The pool must outlive its
// leases.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "idempotency/errors.h"

namespace idempotency::store_detail {

/// ConnectionPool lends at most `size` connections at once, opening them on demand and
/// keeping returned ones idle for reuse.
template <class Connection>
class ConnectionPool {
 public:
  /// Opens a new connection; throws (normally `StoreError`) when it cannot.
  using Connect = std::function<Connection()>;
  /// Says whether a returned connection can carry another call (not broken, nothing left
  /// half-done on it); one that cannot is closed instead of kept.
  using Reusable = std::function<bool(const Connection&)>;

  /// Lease is one borrowed connection; it goes back to the pool when the lease ends.
  class Lease {
   public:
    Lease(Lease&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)),
          connection_(std::move(other.connection_)),
          reused_(other.reused_) {}
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      if (pool_ != nullptr) pool_->give_back(std::move(connection_));
    }

    /// get() returns the driver's connection.
    [[nodiscard]] auto* get() const noexcept { return connection_.get(); }
    /// reused() says whether the connection sat idle in the pool before (the server may have
    /// closed it meanwhile) rather than being opened for this lease.
    [[nodiscard]] bool reused() const noexcept { return reused_; }
    /// discard() closes the connection now, whatever `Reusable` would say, and frees its slot.
    void discard() noexcept { connection_ = Connection(); }
    /// broken() is for a connection that failed: it is discarded, and every idle one is
    /// closed too (drop_idle()), since a restart or a failover kills them all at once and a
    /// retry must open a fresh connection instead of taking the next dead one.
    void broken() noexcept {
      discard();
      if (pool_ != nullptr) pool_->drop_idle();
    }

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, Connection connection, bool reused)
        : pool_(pool), connection_(std::move(connection)), reused_(reused) {}

    ConnectionPool* pool_;
    Connection connection_;
    bool reused_;
  };

  /// ConnectionPool() names the store in messages (`"postgres"`), bounds the pool to `size`
  /// connections and waits up to `wait` (a year or more: without limit) for a free one.
  /// Opens nothing yet.
  ConnectionPool(std::string store, std::size_t size, std::chrono::milliseconds wait,
                 Connect connect, Reusable reusable)
      : store_(std::move(store)),
        size_(size),
        wait_(wait),
        connect_(std::move(connect)),
        reusable_(std::move(reusable)) {}

  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;
  ~ConnectionPool() = default;

  /// add() hands the pool a connection opened elsewhere (a backend's first, set up once).
  void add(Connection connection) {
    std::lock_guard lock(mu_);
    ++open_;
    hand_over(std::move(connection));
  }

  /// acquire() lends the most recently returned idle connection, else opens one while fewer
  /// than `size` are open, else queues for one to come back, behind every earlier waiter.
  /// Throws `StoreError` when none is free within `wait`, and whatever `connect` throws.
  Lease acquire() {
    std::unique_lock lock(mu_);
    if (!idle_.empty()) {
      Connection connection = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(connection), true);
    }
    if (open_ < size_) {
      ++open_;  // the slot is taken before connecting, outside the lock
    } else {
      Waiter me;
      waiters_.push_back(&me);
      const auto served = [&] { return me.served; };
      // A wait of a year or more means no limit; wait_for would overflow the clock near max().
      if (wait_ >= std::chrono::hours(24 * 365)) {
        me.ready.wait(lock, served);
      } else if (!me.ready.wait_for(lock, wait_, served)) {
        std::erase(waiters_, &me);
        throw StoreError(store_ + ": no pooled connection became free within " +
                         std::to_string(wait_.count()) + " ms (pool_size " + std::to_string(size_) +
                         ")");
      }
      if (me.connection) return Lease(this, std::move(me.connection), true);
      // Else handed a slot a closed connection freed; serve_slot() counted it in open_.
    }
    lock.unlock();
    try {
      return Lease(this, connect_(), false);
    } catch (...) {
      give_back(Connection());
      throw;
    }
  }

  /// waiting() counts the callers queued in acquire() right now (for tests and metrics).
  [[nodiscard]] std::size_t waiting() {
    std::lock_guard lock(mu_);
    return waiters_.size();
  }

  /// drop_idle() closes every idle connection: after one failed, the others most likely lead
  /// to the same dead server.
  void drop_idle() noexcept {
    std::vector<Connection> stale;
    {
      std::lock_guard lock(mu_);
      stale.swap(idle_);
      open_ -= stale.size();
      while (open_ < size_ && serve_slot()) {
      }
    }
  }

 private:
  // A thread queued in acquire(); served (under mu_) with a connection, or with a slot to open
  // one (an empty `connection`).
  struct Waiter {
    std::condition_variable ready;
    Connection connection;
    bool served = false;
  };

  // hand_over() gives a usable connection to the longest waiter, else keeps it idle. Under mu_.
  void hand_over(Connection connection) {
    if (waiters_.empty()) {
      idle_.push_back(std::move(connection));
      return;
    }
    Waiter* first = waiters_.front();
    waiters_.pop_front();
    first->connection = std::move(connection);
    first->served = true;
    first->ready.notify_one();  // under mu_: the waiter cannot leave (and free `ready`) first
  }

  // serve_slot() lets the longest waiter open a connection in a freed slot; false when nobody
  // waits. Under mu_.
  bool serve_slot() {
    if (waiters_.empty()) return false;
    Waiter* first = waiters_.front();
    waiters_.pop_front();
    ++open_;
    first->served = true;
    first->ready.notify_one();
    return true;
  }

  void give_back(Connection connection) noexcept {
    Connection doomed;  // closed after the lock is released: closing may block on the socket
    std::lock_guard lock(mu_);
    if (connection && reusable_(connection)) {
      hand_over(std::move(connection));
    } else {
      doomed = std::move(connection);
      --open_;
      (void)serve_slot();
    }
  }

  const std::string store_;
  const std::size_t size_;
  const std::chrono::milliseconds wait_;
  const Connect connect_;
  const Reusable reusable_;
  std::mutex mu_;
  std::vector<Connection> idle_;  // guarded by mu_; never non-empty while anyone waits
  std::deque<Waiter*> waiters_;   // guarded by mu_; oldest first
  std::size_t open_ = 0;          // idle, lent out or being opened; guarded by mu_
};

}  // namespace idempotency::store_detail
