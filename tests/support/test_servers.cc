#include "support/test_servers.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

namespace idempotency::testing {
namespace {

std::string from_file(const char* file) {
  std::string path = IDEMPOTENCY_TEST_SERVERS_DIR "/";
  path += file;  // not std::string(…) + "/" + file: GCC 12's -Warray-bounds misreads that
  std::ifstream in(path);
  std::string url;
  std::getline(in, url);
  return url;
}

std::string from_env_or_file(const char* env, const char* file) {
  if (const char* v = std::getenv(env); v != nullptr && *v != '\0') return v;
  return from_file(file);
}

}  // namespace

std::string redis_url() { return from_env_or_file("REDIS_URL", "redis.url"); }

std::string redis_tls_url() { return from_file("redis_tls.url"); }

std::string redis_cluster_url() { return from_file("redis_cluster.url"); }

std::string redis_cluster_tls_url() { return from_file("redis_cluster_tls.url"); }

std::string postgres_url() { return from_env_or_file("POSTGRES_URL", "postgres.url"); }

std::string postgres_tls_url() { return from_env_or_file("POSTGRES_TLS_URL", "postgres_tls.url"); }

std::string postgres_client_cert_url() {
  return from_env_or_file("POSTGRES_CLIENT_CERT_URL", "postgres_client_cert.url");
}

std::string postgres_ca() { return from_env_or_file("POSTGRES_CA", "postgres_ca.path"); }

std::string postgres_wrong_ca() {
  return from_env_or_file("POSTGRES_WRONG_CA", "postgres_wrong_ca.path");
}

std::string pgbouncer_url() { return from_env_or_file("PGBOUNCER_URL", "pgbouncer.url"); }

std::string unique_name(const std::string& stem) {
  static std::atomic<int> counter{0};
  return stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
}

}  // namespace idempotency::testing
