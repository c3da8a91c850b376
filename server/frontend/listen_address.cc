#include "server/frontend/listen_address.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace conv1d {
namespace {

// Splits "host:port" / "[v6]:port"; false when there is no port part.
bool Split(const std::string& address, std::string* host, std::string* port) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return false;
    }
    *host = address.substr(1, close - 1);
    *port = address.substr(close + 2);
    return true;
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  // An unbracketed IPv6 literal has more colons: refuse it, as gRPC would
  // read its last group as the port.
  return host->find(':') == std::string::npos;
}

bool IsHostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
         c == '_';
}

}  // namespace

absl::Status CheckListenAddress(const std::string& flag, const std::string& address) {
  std::string host, port;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", absl::CHexEscape(address), "' ", why));
  };
  if (!Split(address, &host, &port)) {
    return bad("is not host:port (IPv6 as [addr]:port)");
  }
  if (host.empty()) return bad("has no host (use 0.0.0.0 or [::] for every interface)");
  const bool bracketed = address.front() == '[';
  for (char c : host) {
    if (!(IsHostChar(c) || (bracketed && (c == ':' || c == '%')))) {
      return bad("has a host that is neither an IP address nor a DNS name");
    }
  }
  int port_number = -1;
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(),
                   [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
      !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return bad("has a port outside 0..65535");
  }
  return absl::OkStatus();
}

std::string BindError(const std::string& address) {
  std::string host, port;
  if (!Split(address, &host, &port)) return "not host:port";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return gai_strerror(rc);
  }
  std::string error;
  for (addrinfo* a = found; a != nullptr && error.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    // As gRPC binds: SO_REUSEADDR (a port in TIME_WAIT is free), no
    // SO_REUSEPORT (a port with a listener is not).
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return error;
}

}  // namespace conv1d
