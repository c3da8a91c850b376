// HttpGet and SumMetric (prom_scrape.h). Stateless: thread-safe.
#include "client/load/prom_scrape.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace conv1d {

namespace {

// The body of a whole HTTP answer `resp` when its status is 200.
absl::StatusOr<std::string> ResponseBody(const std::string& resp) {
  const size_t body = resp.find("\r\n\r\n");
  if (body == std::string::npos) return absl::UnavailableError("malformed HTTP response");
  const absl::string_view status_line = absl::string_view(resp).substr(0, resp.find("\r\n"));
  if (!absl::StrContains(status_line, " 200")) {
    return absl::UnavailableError(absl::StrCat("metrics endpoint answered '", status_line, "'"));
  }
  return resp.substr(body + 4);
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& url, absl::Duration timeout,
                                    const ScrapeTls* tls) {
  absl::string_view rest = url;
  const bool https = absl::ConsumePrefix(&rest, "https://");
  if (!https && !absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics url '", url, "' is not http:// or https://"));
  }
  if (https && tls == nullptr) {
    // The system's default CAs, no client certificate; built once.
    static const auto* const default_tls =
        new absl::StatusOr<std::shared_ptr<const ScrapeTls>>(ScrapeTls::Create({}));
    if (!default_tls->ok()) return default_tls->status();
    tls = default_tls->value().get();
  }
  const size_t slash = rest.find('/');
  const absl::string_view hostport = rest.substr(0, slash);
  const std::string path = slash == absl::string_view::npos ? "/" : std::string(rest.substr(slash));
  // A colon inside an IPv6 literal's brackets is not a port's.
  const size_t colon = hostport.rfind(':');
  const bool has_port =
      colon != absl::string_view::npos && hostport.find(']', colon) == absl::string_view::npos;
  std::string host = std::string(has_port ? hostport.substr(0, colon) : hostport);
  const std::string port =
      has_port ? std::string(hostport.substr(colon + 1)) : https ? "443" : "80";
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) host = host.substr(1, host.size() - 2);

  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("connect to ", hostport, " failed"));

  const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", hostport,
                                       "\r\nAccept: text/plain\r\n\r\n");
  const absl::Time deadline = absl::Now() + timeout;
  if (https) {
    absl::StatusOr<std::string> answer = tls->Exchange(fd, host, req, deadline);
    close(fd);
    if (!answer.ok()) {
      return absl::Status(answer.status().code(),
                          absl::StrCat(url, ": ", answer.status().message()));
    }
    return ResponseBody(*answer);
  }
  size_t sent = 0;
  while (sent < req.size()) {
    ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError("send to metrics endpoint failed");
    }
    sent += static_cast<size_t>(n);
  }
  std::string resp;
  char buf[16384];
  for (;;) {
    const int left_ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd p{fd, POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, left_ms) <= 0) {
      close(fd);
      return absl::DeadlineExceededError("metrics endpoint timed out");
    }
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return ResponseBody(resp);
}

double SumMetric(absl::string_view exposition, absl::string_view name,
                 absl::string_view label_filter, int* samples) {
  double sum = 0;
  if (samples != nullptr) *samples = 0;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    if (!absl::StartsWith(line, name)) continue;
    absl::string_view rest = line.substr(name.size());
    absl::string_view labels;
    if (!rest.empty() && rest[0] == '{') {
      const size_t close = rest.rfind('}');
      if (close == absl::string_view::npos) continue;
      labels = rest.substr(1, close - 1);
      rest = rest.substr(close + 1);
    } else if (rest.empty() || rest[0] != ' ') {
      continue;  // a longer name with this prefix
    }
    if (!label_filter.empty() && !absl::StrContains(labels, label_filter)) continue;
    rest = absl::StripLeadingAsciiWhitespace(rest);
    absl::string_view value = rest.substr(0, rest.find(' '));
    double v;
    if (absl::SimpleAtod(value, &v)) {
      sum += v;
      if (samples != nullptr) ++*samples;
    }
  }
  return sum;
}

}  // namespace conv1d
