// "host:port" as configurations and Redis Cluster redirects write it. Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tollgate::util {

struct HostPort {
  std::string host;  // without brackets: "::1", not "[::1]"; may be empty
  std::string port;
};

// Splits "host:port", "[::1]:port" or "::1:port" at the last colon and drops the brackets of
// an IPv6 literal. nullopt when there is no colon or no port; an empty host is returned as it
// is (a Redis redirect's ":6380" means "the node that answered"), for the caller to refuse or
// fill in.
inline std::optional<HostPort> SplitHostPort(std::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == s.size()) return std::nullopt;
  std::string_view host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return HostPort{std::string(host), std::string(s.substr(colon + 1))};
}

}  // namespace tollgate::util
