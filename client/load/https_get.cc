// ScrapeTls (https_get.h): the OpenSSL client context of the load
// generator's https:// scrapes and one exchange over it. The context is
// built once by Create and only read afterwards (OpenSSL allows SSL_new on
// one context from many threads); each Exchange owns its SSL object.
#include "client/load/https_get.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace conv1d {
namespace {

// OpenSSL writes to the socket with write(2), which raises SIGPIPE when
// the endpoint has gone: for its lifetime the calling thread blocks SIGPIPE,
// and a SIGPIPE raised meanwhile is taken off the pending set before the
// thread's mask is restored (one already pending is left alone).
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~ScopedSigpipeBlock() {
    if (!blocked_) return;
    sigset_t pending;
    sigemptyset(&pending);
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
  bool blocked_ = false;
};

// Every error queued by OpenSSL on this thread, oldest first, as one line
// (the queue is emptied); `fallback` when there is none.
std::string SslErrors(const char* fallback) {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? fallback : out;
}

// Whether `path` can be opened for reading; else why not.
absl::Status Readable(const char* flag, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot read '", path, "': ", std::strerror(errno)));
  }
  std::fclose(f);
  return absl::OkStatus();
}

bool IsIpAddress(const std::string& host) {
  unsigned char addr[16];
  return inet_pton(AF_INET, host.c_str(), addr) == 1 ||
         inet_pton(AF_INET6, host.c_str(), addr) == 1;
}

// Waits until `fd` is ready for what the last SSL call on `ssl` (which
// returned `rc`) wants. OK: call again. Otherwise the call failed for good
// (`*ssl_error` says how) or the deadline passed.
absl::Status AwaitRetry(SSL* ssl, int fd, int rc, absl::Time deadline, int* ssl_error) {
  *ssl_error = SSL_get_error(ssl, rc);
  short events;
  if (*ssl_error == SSL_ERROR_WANT_READ) {
    events = POLLIN;
  } else if (*ssl_error == SSL_ERROR_WANT_WRITE) {
    events = POLLOUT;
  } else {
    return absl::UnavailableError("failed");
  }
  for (;;) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) return absl::DeadlineExceededError("timed out");
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1 << 30)));
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::DeadlineExceededError("timed out");
    if (errno != EINTR) return absl::UnavailableError(std::strerror(errno));
  }
}

// Why an SSL call that AwaitRetry gave up on failed, for a message.
std::string FailureReason(int ssl_error, int saved_errno) {
  if (ssl_error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
    return saved_errno != 0 ? std::strerror(saved_errno) : "connection closed by the endpoint";
  }
  return SslErrors("unknown TLS error");
}

// The error (e.g. an alert) that the endpoint's data already received on
// `ssl` ends in; "" when there is none.
std::string PendingAlert(SSL* ssl) {
  ERR_clear_error();
  char byte;
  const int n = SSL_read(ssl, &byte, 1);
  if (n <= 0 && SSL_get_error(ssl, n) == SSL_ERROR_SSL) return SslErrors("");
  ERR_clear_error();
  return "";
}

// The value of a Content-Length header in the head of `answer`, or -1.
int64_t ContentLength(absl::string_view answer) {
  const size_t end = answer.find("\r\n\r\n");
  if (end == absl::string_view::npos) return -1;
  for (absl::string_view line : absl::StrSplit(answer.substr(0, end), "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(line.substr(0, colon)),
                                "content-length")) {
      continue;
    }
    int64_t n;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(colon + 1)), &n) && n >= 0) {
      return n;
    }
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ScrapeTls>> ScrapeTls::Create(
    const ScrapeTlsOptions& options) {
  if (!options.cert_file.empty() && options.key_file.empty()) {
    return absl::InvalidArgumentError("--metrics_tls_cert: needs --metrics_tls_key");
  }
  if (options.cert_file.empty() && !options.key_file.empty()) {
    return absl::InvalidArgumentError("--metrics_tls_key: needs --metrics_tls_cert");
  }
  ERR_clear_error();
  std::shared_ptr<ScrapeTls> t(new ScrapeTls());
  t->ctx_ = SSL_CTX_new(TLS_client_method());
  if (t->ctx_ == nullptr) {
    return absl::InternalError(absl::StrCat("metrics TLS: ", SslErrors("SSL_CTX_new failed")));
  }
  SSL_CTX_set_min_proto_version(t->ctx_, TLS1_2_VERSION);
  SSL_CTX_set_verify(t->ctx_, SSL_VERIFY_PEER, nullptr);
  if (!options.ca_file.empty()) {
    if (absl::Status s = Readable("metrics_tls_ca", options.ca_file); !s.ok()) return s;
    if (SSL_CTX_load_verify_locations(t->ctx_, options.ca_file.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics_tls_ca: '", options.ca_file,
                       "' is not a PEM CA bundle: ", SslErrors("no certificate in it")));
    }
  } else if (SSL_CTX_set_default_verify_paths(t->ctx_) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_tls_ca: not given, and the system's default CAs cannot be loaded: ",
        SslErrors("unknown error")));
  }
  if (!options.cert_file.empty()) {
    if (absl::Status s = Readable("metrics_tls_cert", options.cert_file); !s.ok()) return s;
    if (absl::Status s = Readable("metrics_tls_key", options.key_file); !s.ok()) return s;
    if (SSL_CTX_use_certificate_chain_file(t->ctx_, options.cert_file.c_str()) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics_tls_cert: '", options.cert_file,
                       "' is not a PEM certificate: ", SslErrors("no certificate in it")));
    }
    EVP_PKEY* key = nullptr;
    if (std::FILE* f = std::fopen(options.key_file.c_str(), "rb"); f != nullptr) {
      key = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
      std::fclose(f);
    }
    if (key == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics_tls_key: '", options.key_file,
                       "' is not a PEM private key (without a passphrase): ",
                       SslErrors("no key in it")));
    }
    const bool matches = X509_check_private_key(SSL_CTX_get0_certificate(t->ctx_), key) == 1;
    const bool used = matches && SSL_CTX_use_PrivateKey(t->ctx_, key) == 1;
    EVP_PKEY_free(key);
    if (!used) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics_tls_key: '", options.key_file,
                       "' is not the key of --metrics_tls_cert '", options.cert_file, "'"));
    }
  }
  ERR_clear_error();
  return std::shared_ptr<const ScrapeTls>(std::move(t));
}

ScrapeTls::~ScrapeTls() {
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

absl::StatusOr<std::string> ScrapeTls::Exchange(int fd, const std::string& host,
                                                absl::string_view request,
                                                absl::Time deadline) const {
  const ScopedSigpipeBlock no_sigpipe;
  ERR_clear_error();
  std::unique_ptr<SSL, void (*)(SSL*)> ssl(SSL_new(ctx_), SSL_free);
  if (ssl == nullptr) return absl::InternalError(SslErrors("SSL_new failed"));
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 || SSL_set_fd(ssl.get(), fd) != 1) {
    return absl::InternalError(absl::StrCat("socket set-up: ", std::strerror(errno)));
  }
  // The certificate must name the host dialled; a name also goes out as SNI
  // (an address must not, RFC 6066).
  if (IsIpAddress(host)) {
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), host.c_str()) != 1) {
      return absl::InternalError(absl::StrCat("cannot verify against address ", host));
    }
  } else if (SSL_set_tlsext_host_name(ssl.get(), host.c_str()) != 1 ||
             SSL_set1_host(ssl.get(), host.c_str()) != 1) {
    return absl::InternalError(absl::StrCat("cannot verify against host name ", host));
  }
  SSL_set_hostflags(ssl.get(), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);

  int ssl_error = 0;
  for (;;) {
    errno = 0;
    const int rc = SSL_connect(ssl.get());
    if (rc == 1) break;
    const int saved_errno = errno;
    absl::Status s = AwaitRetry(ssl.get(), fd, rc, deadline, &ssl_error);
    if (s.ok()) continue;
    if (absl::IsDeadlineExceeded(s)) {
      return absl::DeadlineExceededError("timed out in the TLS handshake");
    }
    const long verify = SSL_get_verify_result(ssl.get());
    if (verify != X509_V_OK) {
      ERR_clear_error();
      return absl::UnavailableError(
          absl::StrCat("TLS handshake failed: certificate verify failed: ",
                       X509_verify_cert_error_string(verify)));
    }
    return absl::UnavailableError(
        absl::StrCat("TLS handshake failed: ", FailureReason(ssl_error, saved_errno)));
  }

  size_t sent = 0;
  while (sent < request.size()) {
    errno = 0;
    const int n = SSL_write(ssl.get(), request.data() + sent,
                            static_cast<int>(std::min<size_t>(request.size() - sent, 1 << 20)));
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    const int saved_errno = errno;
    absl::Status s = AwaitRetry(ssl.get(), fd, n, deadline, &ssl_error);
    if (s.ok()) continue;
    if (absl::IsDeadlineExceeded(s)) return absl::DeadlineExceededError("timed out sending");
    // Under TLS 1.3 an endpoint refuses the client (e.g. mutual TLS without
    // a certificate) after the handshake, with an alert, and closes; the
    // alert says more than the reset connection.
    std::string why = FailureReason(ssl_error, saved_errno);
    if (std::string alert = PendingAlert(ssl.get()); !alert.empty()) {
      return absl::UnavailableError(absl::StrCat("TLS connection failed: ", alert));
    }
    return absl::UnavailableError(absl::StrCat("sending over TLS failed: ", why));
  }

  std::string answer;
  char buf[16384];
  for (;;) {
    errno = 0;
    const int n = SSL_read(ssl.get(), buf, static_cast<int>(sizeof(buf)));
    if (n > 0) {
      answer.append(buf, static_cast<size_t>(n));
      continue;
    }
    const int saved_errno = errno;
    absl::Status s = AwaitRetry(ssl.get(), fd, n, deadline, &ssl_error);
    if (s.ok()) continue;
    if (ssl_error == SSL_ERROR_ZERO_RETURN) break;  // close_notify: the answer is whole
    if (absl::IsDeadlineExceeded(s)) return absl::DeadlineExceededError("timed out reading");
    // A close without close_notify could have cut the answer short: only a
    // Content-Length that it meets says it did not.
    const int64_t length = ContentLength(answer);
    const size_t head = answer.find("\r\n\r\n");
    if (length >= 0 && head != std::string::npos &&
        answer.size() - head - 4 == static_cast<size_t>(length)) {
      ERR_clear_error();
      break;
    }
    // The alert of an endpoint that refuses the client (e.g. mutual TLS
    // without a certificate) arrives here under TLS 1.3.
    const std::string why = FailureReason(ssl_error, saved_errno);
    return absl::UnavailableError(answer.empty()
                                      ? absl::StrCat("TLS connection failed: ", why)
                                      : absl::StrCat("TLS connection closed after ",
                                                     answer.size(), " bytes: ", why));
  }
  SSL_shutdown(ssl.get());  // our close_notify, best effort
  ERR_clear_error();
  return answer;
}

}  // namespace conv1d
