// RedisLock: the Redis / Memorystore backend (one string per key, one Lua script per call).
//
//   idempotency::RedisLock backend("redis://:secret@10.0.0.3:6379/2");
//   idempotency::RedisLock secured("rediss://:secret@10.0.0.3:6378?ca=/etc/redis/server-ca.pem");
//   auto held = idempotency::lock(message_id, backend);
//
// `rediss://` speaks TLS (OpenSSL): the server's certificate must chain to `ca=` (else the
// system's trust store) and name the host (or `sni=`); see parse_redis_url().
//
// Each record is one Redis string under `RedisOptions::key_prefix` (a hash written by an
// earlier version is read too, and rewritten as a string), so every call touches a single key.
// `redis+cluster://host:port[,host:port…]` (and `rediss+cluster://`) talks to a Redis Cluster:
// each call goes to the master of its key's slot, following MOVED / ASK. claim, complete and
// release are each one round trip: a Lua script, loaded once and called with EVALSHA,
// re-expresses the core's `transition()` and decides on the server. Time is the server's own
// (`TIME`), so clock skew between client instances cannot break a lease; every write sets the
// key's expiry to the record's `expires_at`, so Redis deletes the record exactly when its
// retention window ends (a claim after that starts again at fence 1).
//
// On Redis 7, a single node and the server's clock, a claim first sends a plain `SET NX PX GET`
// and `PEXPIRETIME` in one write: a fresh key gets its record, its lease read back from the
// key's expiry, and a DONE key answers with its record, both without the script (a sixth of
// its cost to the server). After a claim that met a holder, `TIME` goes along too, and a live
// holder is answered from its record as well; any other key goes on to the script, a second
// round trip.
//
// Error handling: a call that fails (server down, timeout, auth refused, an unexpected
// reply) throws `StoreError` with the server's message, never the key, and never reports
// an outcome it did not receive. A dropped connection is re-established on the next call.
//
// Thread safety: safe from any number of threads. Calls share `RedisOptions::pipelines`
// connections (per master on a cluster), concurrent ones batched into one write; with
// `?replicas=N` or `pipelines = 0` (and on a cluster for `ASKING` and the command after it)
// they share a bounded pool of connections (`RedisOptions::pool_size`) instead and wait up to
// `RedisOptions::pool_wait` for a free one when all are busy.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/backend.h"
#include "idempotency/record.h"
#include "idempotency/wait_counts.h"

namespace idempotency {

/// Options for RedisLock. Fill with designated initializers.
struct RedisOptions {
  /// ttl, and the clock: nullptr (the default) judges time by the server's `TIME`; a clock
  /// set here is used instead (tests move time with it; production should leave it null,
  /// since then client clock skew could break leases).
  BackendOptions backend;
  /// Prepended to every key; several subscriptions or environments can share one server.
  std::string key_prefix = "idempotency:";
  /// The most connections open at once; a call waits for a free one up to `pool_wait`.
  /// At least 1. Connections are opened only when every open one is busy, so the default
  /// costs nothing at low concurrency and lets 64 concurrent callers each have one (Redis
  /// serves ten thousand clients by default; queueing for 8 halved the rate at 64 threads).
  std::size_t pool_size = 64;
  /// Connections that concurrent calls share (pipelining): a call made while others await
  /// their replies is queued, and the calls queued meanwhile go out in one write and their
  /// replies come back together, so many calls cost about one send and one receive (on
  /// loopback and in a VPC a call's cost is mostly its system calls). A lone call is sent at
  /// once. Per master on a cluster. 0: every call borrows a connection of its own from the
  /// pool. Not used with `?replicas=N` (WAIT holds its connection until replicas answer): that
  /// uses the pool. Above 0 on a single node, `claim_async` and `complete_async` go over one
  /// more connection, read by an I/O thread of the backend's (started by the first such call),
  /// which runs their callbacks.
  std::size_t pipelines = 2;
  /// How long a call waits for a pooled connection before `StoreError`. At least 0.
  std::chrono::milliseconds pool_wait = std::chrono::seconds(30);
  /// How long opening a connection may take before `StoreError`. Positive.
  std::chrono::milliseconds connect_timeout{2000};
  /// How long one command may wait for its reply before `StoreError`. Positive.
  std::chrono::milliseconds command_timeout{2000};
};

/// RedisTls is the TLS half of a `rediss://` URL. Certificate verification is always on;
/// only the host name check can be turned off (`verify=ca`).
struct RedisTls {
  /// CA certificates (PEM) the server's certificate must chain to (`ca=`); empty: the
  /// system's trust store (OpenSSL's default paths, which honour `SSL_CERT_FILE` and
  /// `SSL_CERT_DIR`).
  std::string ca_file;
  /// Client certificate chain (PEM, `cert=`), for a server that requires one; with `key_file`.
  std::string cert_file;
  /// The client certificate's private key (PEM, unencrypted, `key=`); with `cert_file`.
  std::string key_file;
  /// The name sent as SNI and required in the server's certificate (`sni=`); empty: the
  /// URL's host (an IP address is then checked against the certificate's IP entries).
  std::string server_name;
  /// True (`verify=full`, the default): the certificate must name the host. False
  /// (`verify=ca`): any certificate that chains to the CA is accepted.
  bool verify_host = true;
};

/// RedisNode is one node's address.
struct RedisNode {
  std::string host;
  int port = 6379;
};

/// RedisEndpoint is a parsed `redis://`, `rediss://`, `redis+cluster://` or
/// `rediss+cluster://` URL.
struct RedisEndpoint {
  std::string host;
  int port = 6379;
  /// ACL user name (Redis 6+); empty: the default user.
  std::string user;
  /// Password for AUTH; empty: no AUTH.
  std::string password;
  /// Database number for SELECT.
  int db = 0;
  /// Set for `rediss://` and `rediss+cluster://`: every connection speaks TLS.
  std::optional<RedisTls> tls;
  /// True for the cluster schemes: `seeds` lists the nodes the URL names (`host` and `port`
  /// are the first), from which the client learns the cluster's slot map.
  bool cluster = false;
  std::vector<RedisNode> seeds;
  /// `?replicas=N`: a claim that wins and a complete that stores wait (WAIT) until N replicas
  /// have the write, for up to half of `command_timeout`, and throw `StoreError` when fewer
  /// did (never a silent success). 0 (the default): acknowledged by the master alone.
  int replicas = 0;
  /// `?pipelines=N` (0 to 64, not with `replicas=`): overrides
  /// `RedisOptions::pipelines`, so a URL alone (the sidecar's `--backend`) can choose.
  std::optional<std::size_t> pipelines;
};

/// parse_redis_url() parses `redis://[[user]:password@]host[:port][/db]`,
/// `rediss://…[?ca=PATH&cert=PATH&key=PATH&sni=NAME&verify=full|ca]` (user, password and
/// parameter values percent-decoded; an IPv6 host in brackets), and the Redis Cluster forms
/// `redis+cluster://[[user]:password@]host[:port][,host[:port]…]` and `rediss+cluster://…`
/// with the same TLS parameters (no database number: a cluster has only 0). Throws
/// `std::invalid_argument` naming the part that is wrong; the message never contains the
/// password.
[[nodiscard]] RedisEndpoint parse_redis_url(std::string_view url);

/// RedisWaitCounts: how this instance's cross-instance waits ended (wait_counts.h).
using RedisWaitCounts = WaitCounts;

/// RedisLock stores records in Redis, deciding every transition server-side in Lua.
class RedisLock final : public LockBackend {
 public:
  /// RedisLock() parses `url`, opens one connection (TLS handshake, AUTH, SELECT) and loads
  /// the script, so a wrong address, certificate or password fails here. Throws
  /// `std::invalid_argument` for a malformed URL or a bad option, and `StoreError` in one
  /// line when a TLS file cannot be loaded, or the server is unreachable, fails verification,
  /// refuses the credentials or times out (`connect_timeout` bounds the TCP connect and the
  /// TLS handshake together).
  explicit RedisLock(std::string_view url, RedisOptions options = {});
  ~RedisLock() override;

  /// key_prefix() returns the prefix every key is stored under.
  [[nodiscard]] const std::string& key_prefix() const noexcept;

  /// wait_counts() returns how this instance's waits for a change have ended so far.
  [[nodiscard]] RedisWaitCounts wait_counts() const noexcept;

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override;
  bool do_complete(const Claim& claim, std::optional<std::string> result) override;
  /// On a single node with `pipelines` above 0 and no `?replicas=N`: sent on the I/O thread's
  /// connection and answered there (retried once as do_claim is); otherwise the blocking call.
  /// There, on Redis 7 and the server's clock, `SET NX PX GET` comes first (as for do_claim).
  void do_claim_async(std::string_view key, std::chrono::milliseconds lease, ClaimRequest request,
                      ClaimDone done) override;
  /// As do_claim_async().
  void do_complete_async(const Claim& claim, std::optional<std::string> result,
                         CompleteDone done) override;
  /// True where do_claim_async() sends on the I/O thread's connection (above).
  [[nodiscard]] bool do_sends_async() const noexcept override;
  void do_release(const Claim& claim) override;
  std::optional<TimePoint> do_extend(const Claim& claim, std::chrono::milliseconds lease) override;
  /// Returns 0 without a store call: Redis deletes each record itself at its `expires_at`
  /// (PEXPIREAT), and a record an injected clock has expired is treated as absent by every
  /// operation, so there is nothing left to purge.
  std::size_t do_purge_expired() override;
  /// With the server clock a record past `expires_at` is already gone. With an injected clock
  /// Redis reaps it 10 minutes of real time after its remaining lifetime ran out (the injected
  /// clock may run at any pace), so it may still be returned; every operation treats a record
  /// past `expires_at` as absent either way. Throws `StoreError` when the stored value is not a
  /// record.
  std::optional<Record> do_inspect(std::string_view key) override;
  /// Subscribes (on a connection of its own) to the channel the script publishes on when
  /// the record is completed or released, so a waiter in another process wakes at once. Falls
  /// back to sleeping when the server cannot be reached; `claim` then reports the failure.
  void do_wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                          const std::stop_token& stop) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idempotency
