// TLS for Redis connections: the shared context, the handshake (verification on by default,
// bounded by the connection's deadline), and reads and writes through our own socket BIO.
#include "redis_tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <memory>
#include <string>
#include <system_error>

#include "idempotency/errors.h"
#include "redis_poll.h"

namespace idempotency::redis_detail {
std::string system_message(int error) { return std::generic_category().message(error); }

IoResult server_closed() {
  return IoResult{.failure = IoFailure::kClosed, .reason = "the server closed the connection"};
}

IoResult errno_failure(int error) {
  const bool closed = error == ECONNRESET || error == EPIPE;
  return IoResult{.failure = closed ? IoFailure::kClosed : IoFailure::kError,
                  .reason = system_message(error)};
}

namespace {

// The oldest error OpenSSL queued on this thread (the root cause), then an empty queue; ""
// when none was queued.
std::string queued_reason() {
  const unsigned long error = ERR_get_error();
  ERR_clear_error();
  if (error == 0) return "";
  if (ERR_SYSTEM_ERROR(error)) return system_message(ERR_GET_REASON(error));
  const char* reason = ERR_reason_error_string(error);
  return reason != nullptr ? reason : "TLS error " + std::to_string(error);
}

// ---------------------------------------------------------------- our socket BIO

// OpenSSL's own socket BIO writes with write(2), which raises SIGPIPE on a connection the peer
// has reset. Ours sends with MSG_NOSIGNAL, so the process's signal dispositions stay the
// user's. EAGAIN (a non-blocking socket during the handshake, or SO_RCVTIMEO / SO_SNDTIMEO
// passing later) is a retry for OpenSSL: SSL_get_error() then says WANT_READ / WANT_WRITE.
using Socket = TlsSession::Socket;

Socket& socket_of(BIO* bio) { return *static_cast<Socket*>(BIO_get_data(bio)); }

int socket_write(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  for (;;) {
    const ssize_t n = ::send(socket_of(bio).fd, data, static_cast<std::size_t>(size), MSG_NOSIGNAL);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
    return -1;
  }
}

int socket_read(BIO* bio, char* out, int size) {
  BIO_clear_retry_flags(bio);
  for (;;) {
    const ssize_t n = ::recv(socket_of(bio).fd, out, static_cast<std::size_t>(size), 0);
    if (n > 0) return static_cast<int>(n);
    if (n == 0) {
      socket_of(bio).eof = true;
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
    return -1;
  }
}

long socket_ctrl(BIO* bio, int command, long /*number*/, void* /*pointer*/) {
  switch (command) {
    case BIO_CTRL_FLUSH:
      return 1;  // nothing is buffered here: every write went straight to send()
    case BIO_CTRL_EOF:
      return socket_of(bio).eof ? 1 : 0;
    default:
      return 0;
  }
}

const BIO_METHOD* socket_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "idempotency redis socket");
    if (m != nullptr) {
      BIO_meth_set_write(m, socket_write);
      BIO_meth_set_read(m, socket_read);
      BIO_meth_set_ctrl(m, socket_ctrl);
    }
    return m;
  }();
  return method;
}

// ---------------------------------------------------------------- the handshake

bool is_ip_address(const std::string& name) {
  std::array<unsigned char, sizeof(in6_addr)> address{};
  return ::inet_pton(AF_INET, name.c_str(), address.data()) == 1 ||
         ::inet_pton(AF_INET6, name.c_str(), address.data()) == 1;
}

// Why SSL_connect() failed with `error` (SSL_get_error) and errno `saved_errno`.
std::string handshake_reason(const SSL* ssl, int error, int saved_errno) {
  const long verified = SSL_get_verify_result(ssl);
  if (verified != X509_V_OK) {
    ERR_clear_error();
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(verified);
  }
  const unsigned long queued = ERR_peek_error();
  const bool not_tls = ERR_GET_LIB(queued) == ERR_LIB_SSL &&
                       (ERR_GET_REASON(queued) == SSL_R_WRONG_VERSION_NUMBER ||
                        ERR_GET_REASON(queued) == SSL_R_PACKET_LENGTH_TOO_LONG);
  std::string reason = queued_reason();
  if (reason.empty()) {
    if ((error == SSL_ERROR_SYSCALL && saved_errno == 0) || error == SSL_ERROR_ZERO_RETURN) {
      return "the server closed the connection (is this its TLS port?)";
    }
    return saved_errno != 0 ? system_message(saved_errno) : "TLS error";
  }
  if (not_tls) reason += " (is this the server's TLS port?)";
  return reason;
}

}  // namespace

// ---------------------------------------------------------------- TlsContext

TlsContext::TlsContext(const RedisTls& tls)
    : ctx_(SSL_CTX_new(TLS_client_method())),
      server_name_(tls.server_name),
      verify_host_(tls.verify_host) {
  if (ctx_ == nullptr) throw StoreError("redis: cannot create a TLS context: " + queued_reason());
  auto cannot_load = [&](const char* parameter, const std::string& path) {
    const std::string reason = queued_reason();
    SSL_CTX_free(ctx_);
    return StoreError(std::string("redis: cannot load ") + parameter + "=" + path + ": " +
                      (reason.empty() ? "unreadable" : reason));
  };
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  // An EOF without close_notify reads as a clean close: replies are self-delimiting, so a
  // truncation cannot pass for a whole reply, and a dropped connection is simply "closed".
  SSL_CTX_set_options(ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF);
  // Without read-ahead OpenSSL reads each record in two recv() calls (header, then body);
  // with it, one recv() takes all that has arrived, as on plain TCP.
  SSL_CTX_set_read_ahead(ctx_, 1);
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  // An encrypted key fails to load rather than prompting on the terminal.
  SSL_CTX_set_default_passwd_cb(ctx_, [](char*, int, int, void*) { return 0; });
  ERR_clear_error();
  if (tls.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx_) != 1) {
      throw cannot_load("ca", "(the system's trust store)");
    }
  } else if (SSL_CTX_load_verify_locations(ctx_, tls.ca_file.c_str(), nullptr) != 1) {
    throw cannot_load("ca", tls.ca_file);
  }
  if (!tls.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx_, tls.cert_file.c_str()) != 1) {
      throw cannot_load("cert", tls.cert_file);
    }
    if (SSL_CTX_use_PrivateKey_file(ctx_, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      throw cannot_load("key", tls.key_file);
    }
    if (SSL_CTX_check_private_key(ctx_) != 1) {
      ERR_clear_error();
      SSL_CTX_free(ctx_);
      throw StoreError("redis: key=" + tls.key_file + " is not the key of cert=" + tls.cert_file);
    }
  }
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

std::unique_ptr<TlsSession> TlsContext::handshake(
    int fd, const std::string& host, const std::string& where,
    std::chrono::steady_clock::time_point deadline) const {
  auto failed = [&](const std::string& why) {
    return StoreError("redis: TLS handshake with " + where + " failed: " + why);
  };
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) throw failed(queued_reason());
  std::unique_ptr<TlsSession> session(new TlsSession(ssl, fd));
  const std::string& name = server_name_.empty() ? host : server_name_;
  const bool ip = is_ip_address(name);
  // RFC 6066: SNI carries host names only, never an address.
  if (!ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) throw failed(queued_reason());
  if (verify_host_) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const int set = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                       : X509_VERIFY_PARAM_set1_host(param, name.data(), name.size());
    if (set != 1) throw failed("cannot check the certificate for the name " + name);
  }
  for (;;) {
    ERR_clear_error();
    const int status = SSL_connect(ssl);
    const int saved_errno = errno;
    if (status == 1) return session;
    const int error = SSL_get_error(ssl, status);
    short wanted = 0;
    if (error == SSL_ERROR_WANT_READ) wanted = POLLIN;
    if (error == SSL_ERROR_WANT_WRITE) wanted = POLLOUT;
    if (wanted == 0) throw failed(handshake_reason(ssl, error, saved_errno));
    const int ready = poll_until(fd, wanted, deadline);
    if (ready < 0) throw failed(system_message(errno));
    // A plain port waits for the rest of a "command" that never ends: say so.
    if (ready == 0)
      throw failed("no answer within connect_timeout (is this the server's TLS port?)");
  }
}

// ---------------------------------------------------------------- TlsSession

TlsSession::TlsSession(SSL* ssl, int fd) : ssl_(ssl), socket_{fd} {
  const BIO_METHOD* method = socket_method();
  BIO* bio = method != nullptr ? BIO_new(method) : nullptr;
  if (bio == nullptr) {
    SSL_free(ssl_);
    throw StoreError("redis: cannot create a TLS connection: out of memory");
  }
  BIO_set_data(bio, &socket_);
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl_, bio, bio);  // the session owns the BIO; the socket stays the caller's
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

IoResult TlsSession::write(const char* data, std::size_t size) {
  std::size_t sent = 0;
  while (sent < size) {
    ERR_clear_error();
    const int n =
        SSL_write(ssl_, data + sent, static_cast<int>(std::min<std::size_t>(size - sent, INT_MAX)));
    if (n <= 0) return failed(n, errno);
    sent += static_cast<std::size_t>(n);
  }
  return IoResult{.bytes = sent};
}

IoResult TlsSession::read(char* out, std::size_t size) {
  ERR_clear_error();
  const int n = SSL_read(ssl_, out, static_cast<int>(std::min<std::size_t>(size, INT_MAX)));
  if (n > 0) return IoResult{.bytes = static_cast<std::size_t>(n)};
  return failed(n, errno);
}

// SSL_has_pending(), not SSL_pending(): read-ahead may hold whole records not yet decrypted.
bool TlsSession::has_buffered_input() const noexcept { return SSL_has_pending(ssl_) == 1; }

void TlsSession::close_notify() noexcept {
  ERR_clear_error();
  (void)SSL_shutdown(ssl_);  // sends close_notify; the server's own is not awaited
  ERR_clear_error();
}

IoResult TlsSession::failed(int status, int saved_errno) {
  const int error = SSL_get_error(ssl_, status);
  if (error == SSL_ERROR_ZERO_RETURN) return server_closed();
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
    ERR_clear_error();  // the socket's SO_RCVTIMEO / SO_SNDTIMEO passed
    return IoResult{.failure = IoFailure::kTimedOut};
  }
  std::string reason = queued_reason();
  if (error == SSL_ERROR_SYSCALL && reason.empty()) {
    return saved_errno == 0 ? server_closed() : errno_failure(saved_errno);
  }
  return IoResult{.failure = IoFailure::kError, .reason = reason.empty() ? "TLS error" : reason};
}

}  // namespace idempotency::redis_detail
