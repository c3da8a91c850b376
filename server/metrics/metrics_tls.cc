#include "server/metrics/metrics_tls.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace conv1d {
namespace {

constexpr size_t kMaxRequestHeadBytes = 16 << 10;

bool SameTime(const std::timespec& a, const std::timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

std::string LastSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  char buf[256] = "no PEM data";
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

void SetTimeouts(int fd, int timeout_ms) {
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool SendAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t sent = send(fd, data, n, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

int ConnectLoopback(int port, int timeout_ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  SetTimeouts(fd, timeout_ms);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsTlsProxy>> MetricsTlsProxy::Create(
    MetricsTlsOptions options) {
  std::unique_ptr<MetricsTlsProxy> p(new MetricsTlsProxy(std::move(options)));
  const MetricsTlsOptions& o = p->options_;
  if (absl::Status s = p->LoadPairIfChanged(); !s.ok()) return s;
  p->ctx_ = SSL_CTX_new(TLS_server_method());
  if (p->ctx_ == nullptr) return absl::UnavailableError("metrics TLS: " + LastSslError());
  SSL_CTX_set_min_proto_version(p->ctx_, TLS1_2_VERSION);
  if (!o.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(p->ctx_, o.client_ca_file.c_str(), nullptr) != 1) {
      return absl::UnavailableError(absl::StrCat("--metrics_tls_client_ca: '",
                                                 o.client_ca_file, "': ", LastSslError()));
    }
    SSL_CTX_set_verify(p->ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  SSL_CTX_set_cert_cb(p->ctx_, &MetricsTlsProxy::OnCertificate, p.get());

  const size_t colon = o.listen_address.rfind(':');
  std::string host = o.listen_address.substr(0, colon);
  const std::string port = o.listen_address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_listen: cannot listen on '", o.listen_address, "': ", gai_strerror(rc)));
  }
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && p->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      p->listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (p->listen_fd_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_listen: cannot listen on '", o.listen_address, "': ", error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  p->bound_port_ = ntohs(bound.ss_family == AF_INET6
                             ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                             : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(p->wake_fds_, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("metrics TLS: pipe: ", std::strerror(errno)));
  }
  p->acceptor_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
  return p;
}

MetricsTlsProxy::~MetricsTlsProxy() {
  if (acceptor_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      // Cuts connections that are waiting on a slow peer.
      for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
    }
    const char byte = 0;
    (void)!write(wake_fds_[1], &byte, 1);
    acceptor_.join();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* serving) { return *serving == 0; }, &serving_));
  }
  for (int fd : {listen_fd_, wake_fds_[0], wake_fds_[1]}) {
    if (fd >= 0) close(fd);
  }
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  absl::MutexLock lock(&pair_mu_);
  if (cert_ != nullptr) X509_free(cert_);
  if (chain_ != nullptr) sk_X509_pop_free(static_cast<STACK_OF(X509)*>(chain_), X509_free);
  if (key_ != nullptr) EVP_PKEY_free(key_);
}

void MetricsTlsProxy::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("metrics TLS: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || serving_ >= options_.max_connections) {
        close(fd);
        continue;
      }
      ++serving_;
      open_fds_.insert(fd);
    }
    std::thread([this, fd] {
      Serve(fd);
      absl::MutexLock lock(&mu_);
      open_fds_.erase(fd);
      close(fd);
      --serving_;
    }).detach();
  }
}

void MetricsTlsProxy::Serve(int fd) {
  SetTimeouts(fd, options_.timeout_ms);
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return;
  SSL_set_fd(ssl, fd);
  if (SSL_accept(ssl) != 1) {
    ERR_clear_error();
    SSL_free(ssl);
    return;
  }
  // The request head (a scrape is a GET without a body).
  std::string head;
  char buf[16 << 10];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxRequestHeadBytes) {
    const int n = SSL_read(ssl, buf, static_cast<int>(sizeof(buf)));
    if (n <= 0) break;
    head.append(buf, static_cast<size_t>(n));
  }
  if (head.find("\r\n\r\n") != std::string::npos) {
    const int up = ConnectLoopback(options_.upstream_port, options_.timeout_ms);
    if (up >= 0) {
      if (SendAll(up, head.data(), head.size())) {
        for (;;) {
          const ssize_t n = recv(up, buf, sizeof(buf), 0);
          if (n <= 0 || SSL_write(ssl, buf, static_cast<int>(n)) != n) break;
        }
      }
      close(up);
    }
  }
  SSL_shutdown(ssl);
  ERR_clear_error();
  SSL_free(ssl);
}

absl::Status MetricsTlsProxy::LoadPairIfChanged() {
  const std::string& cert_file = options_.cert_file;
  const std::string& key_file = options_.key_file;
  struct stat cert_st{}, key_st{};
  if (stat(cert_file.c_str(), &cert_st) != 0 || stat(key_file.c_str(), &key_st) != 0) {
    return absl::UnavailableError(absl::StrCat("metrics TLS: cannot stat '", cert_file,
                                               "' or '", key_file, "'"));
  }
  absl::MutexLock lock(&pair_mu_);
  if (cert_ != nullptr && SameTime(cert_st.st_mtim, cert_mtime_) &&
      SameTime(key_st.st_mtim, key_mtime_)) {
    return absl::OkStatus();
  }
  X509* cert = nullptr;
  STACK_OF(X509)* chain = sk_X509_new_null();
  if (std::FILE* f = std::fopen(cert_file.c_str(), "rb"); f != nullptr) {
    cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
    while (cert != nullptr) {
      X509* extra = PEM_read_X509(f, nullptr, nullptr, nullptr);
      if (extra == nullptr) break;
      sk_X509_push(chain, extra);
    }
    ERR_clear_error();
    std::fclose(f);
  }
  EVP_PKEY* key = nullptr;
  if (std::FILE* f = std::fopen(key_file.c_str(), "rb"); f != nullptr) {
    key = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
    std::fclose(f);
  }
  if (cert == nullptr || key == nullptr || X509_check_private_key(cert, key) != 1) {
    const std::string why = LastSslError();
    if (cert != nullptr) X509_free(cert);
    if (key != nullptr) EVP_PKEY_free(key);
    sk_X509_pop_free(chain, X509_free);
    return absl::UnavailableError(absl::StrCat("metrics TLS: '", cert_file, "' and '",
                                               key_file, "' are not a matching PEM pair: ",
                                               why));
  }
  if (cert_ != nullptr) X509_free(cert_);
  if (chain_ != nullptr) sk_X509_pop_free(static_cast<STACK_OF(X509)*>(chain_), X509_free);
  if (key_ != nullptr) EVP_PKEY_free(key_);
  cert_ = cert;
  chain_ = chain;
  key_ = key;
  cert_mtime_ = cert_st.st_mtim;
  key_mtime_ = key_st.st_mtim;
  return absl::OkStatus();
}

int MetricsTlsProxy::OnCertificate(SSL* ssl, void* arg) {
  auto* self = static_cast<MetricsTlsProxy*>(arg);
  if (absl::Status s = self->LoadPairIfChanged(); !s.ok()) {
    // A renewal caught half-written, or a bad pair: the last good one stays.
    spdlog::warn("{}; serving the previous certificate", std::string(s.message()));
  }
  absl::MutexLock lock(&self->pair_mu_);
  return SSL_use_cert_and_key(ssl, self->cert_, self->key_,
                              static_cast<STACK_OF(X509)*>(self->chain_), 1) == 1
             ? 1
             : 0;
}

}  // namespace conv1d
