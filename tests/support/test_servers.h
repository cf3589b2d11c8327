// Where the tests find the real Redis and PostgreSQL servers.
//
// `REDIS_URL` / `POSTGRES_URL` (and `POSTGRES_TLS_URL`, `POSTGRES_CLIENT_CERT_URL`,
// `POSTGRES_CA`, `POSTGRES_WRONG_CA`, `PGBOUNCER_URL`) point at servers a developer runs;
// otherwise the CTest fixture scripts (tests/support/servers/) start private ones on free
// 127.0.0.1 ports and write their URLs into files that these functions read. Redis's TLS port and
// both clusters have no override: their tests need what the fixture made (certificates, nodes).
// With CI=true a missing server fails the test instead of skipping it.
#pragma once

#include <string>

namespace idempotency::testing {

/// redis_url() returns the test Redis URL, or "" when no server was started or named.
std::string redis_url();

/// redis_tls_url() returns the fixture's `rediss://` URL (its own server's TLS port, with the
/// test CA, the client certificate and sni=localhost), or "" when the fixture did not run.
/// There is no environment override: the TLS tests need the certificates the fixture made.
std::string redis_tls_url();

/// redis_cluster_url() returns the fixture's Redis Cluster as `redis+cluster://host:port,…`
/// (every node), or "" when the fixture did not run.
std::string redis_cluster_url();

/// redis_cluster_tls_url() returns the fixture's TLS Redis Cluster as `rediss+cluster://` (every
/// node's TLS port, with the test CA and sni=localhost), or "" when the fixture did not run.
std::string redis_cluster_tls_url();

/// postgres_url() returns the test PostgreSQL URL, or "" when none was started or named.
std::string postgres_url();

/// postgres_tls_url() returns the test PostgreSQL's URL over TLS (host `localhost`,
/// `sslmode=verify-full`, `sslrootcert` the fixture's test CA), or "" when there is none.
std::string postgres_tls_url();

/// postgres_client_cert_url() returns postgres_tls_url()'s server as the role `idem_cert`,
/// which it admits by the client certificate in `sslcert`/`sslkey` alone, or "".
std::string postgres_client_cert_url();

/// postgres_ca() returns the path of the test CA that signed the test PostgreSQL's
/// certificate (for `localhost` only), or "" when the fixture made none.
std::string postgres_ca();

/// postgres_wrong_ca() returns the path of a CA certificate that signed nothing the test
/// PostgreSQL presents, or "" when the fixture made none.
std::string postgres_wrong_ca();

/// pgbouncer_url() returns the URL of PgBouncer in transaction pooling mode in front of the
/// test PostgreSQL, or "" when none runs.
std::string pgbouncer_url();

/// unique_name() returns a fresh identifier-safe name (e.g. for a table or key prefix).
std::string unique_name(const std::string& stem);

}  // namespace idempotency::testing
