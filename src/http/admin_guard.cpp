// The admin listener's Host allow-list and bearer token (issue 31). A page served from a name
// the attacker points at 127.0.0.1 (DNS rebinding) reaches the listener with its own name in
// Host: only names and addresses the listener knows as its own are answered. An address cannot
// be rebound, so any address is safe when the listener is bound to all of them.
#include <tollgate/http/admin_guard.hpp>

#include <algorithm>
#include <optional>

#include <arpa/inet.h>

#include <tollgate/util/ascii.hpp>
#include <tollgate/util/digest.hpp>
#include <tollgate/util/host_port.hpp>

namespace tollgate::http {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// A name as compared: lower case, without the one trailing dot of an absolute name.
std::string NameKey(std::string_view name) {
  if (name.size() > 1 && name.back() == '.') name.remove_suffix(1);
  return Lower(name);
}

// 16 bytes (IPv4 as ::ffff:a.b.c.d) of an address in its plain form, or nullopt: dotted quads
// exactly as inet_ntop writes them (no 127.1, 0x7f.0.0.1 or 0127.0.0.1), IPv6 without a zone.
std::optional<std::string> Address(std::string_view text, bool v6) {
  const std::string s(text);
  unsigned char bytes[16] = {};
  if (v6) {
    if (inet_pton(AF_INET6, s.c_str(), bytes) != 1) return std::nullopt;
    return std::string(reinterpret_cast<char*>(bytes), 16);
  }
  in_addr v4{};
  char back[INET_ADDRSTRLEN] = {};
  if (inet_pton(AF_INET, s.c_str(), &v4) != 1 || !inet_ntop(AF_INET, &v4, back, sizeof back) ||
      s != back) {
    return std::nullopt;
  }
  bytes[10] = bytes[11] = 0xff;
  std::copy_n(reinterpret_cast<const unsigned char*>(&v4), 4, bytes + 12);
  return std::string(reinterpret_cast<char*>(bytes), 16);
}

bool IsLoopback(const std::string& a) {
  static const std::string kV6(15, '\0');  // ::1 is 15 zero bytes and a 1
  static const std::string kMapped = std::string(10, '\0') + "\xff\xff";
  return a == kV6 + '\x01' || (a.compare(0, 12, kMapped) == 0 && a[12] == 127);
}

// The host of `authority` (brackets removed) when the rest is an optional `:port`.
std::optional<std::string_view> HostOf(std::string_view authority, bool* bracketed) {
  std::string_view host, rest;
  *bracketed = authority.starts_with('[');
  if (*bracketed) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = authority.substr(1, close - 1);
    rest = authority.substr(close + 1);
  } else {
    const size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) rest = authority.substr(colon);
  }
  if (!rest.empty()) {
    const std::string_view port = rest.substr(1);
    if (rest[0] != ':' || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
  }
  if (host.empty()) return std::nullopt;
  return host;
}

}  // namespace

AdminGuard::AdminGuard(std::string_view listen, const std::vector<std::string>& names,
                       std::string token) {
  names_.push_back("localhost");
  for (const std::string& n : names) {
    std::string_view name = n;
    const bool bracketed = name.size() > 2 && name.front() == '[' && name.back() == ']';
    if (bracketed) name = name.substr(1, name.size() - 2);
    if (auto a = Address(name, bracketed || name.find(':') != std::string_view::npos)) {
      addresses_.push_back(*a);  // matched however the Host spells it
    } else {
      names_.push_back(NameKey(name));
    }
  }
  const auto hp = util::SplitHostPort(listen);
  const std::string host = hp ? hp->host : std::string(listen);
  wildcard_ = host.empty() || host == "0.0.0.0" || host == "::";
  const bool v6 = host.find(':') != std::string::npos;
  if (auto a = Address(host, v6)) {
    bound_ = *a;
  } else if (!host.empty()) {
    names_.push_back(NameKey(host));  // bound by name: that name is its own
  }
  if (!token.empty()) token_digest_ = util::Sha256Raw(token);
}

bool AdminGuard::HostAllowed(std::string_view value) const {
  bool bracketed = false;
  const auto host = HostOf(value, &bracketed);
  if (!host) return false;
  if (auto a = Address(*host, bracketed)) {
    return wildcard_ || IsLoopback(*a) || *a == bound_ ||
           std::find(addresses_.begin(), addresses_.end(), *a) != addresses_.end();
  }
  if (bracketed) return false;  // not an IPv6 address (a zone, garbage)
  const std::string key = NameKey(*host);
  return std::find(names_.begin(), names_.end(), key) != names_.end();
}

AdminGuard::Token AdminGuard::CheckToken(const RequestHead& head) const {
  if (token_digest_.empty()) return Token::kOk;
  std::string_view value;
  size_t lines = 0;
  for (const RequestHead::Field& f : head.fields) {
    if (util::EqualsIgnoreCase(f.name, "Authorization") && ++lines == 1) value = f.value;
  }
  if (lines == 0) return Token::kMissing;
  constexpr std::string_view kScheme = "Bearer";
  if (lines > 1 || value.size() <= kScheme.size() + 1 ||
      !util::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme) ||
      value[kScheme.size()] != ' ') {
    return Token::kInvalid;
  }
  std::string_view presented = value.substr(kScheme.size());
  presented.remove_prefix(std::min(presented.find_first_not_of(' '), presented.size()));
  while (!presented.empty() && (presented.back() == ' ' || presented.back() == '\t')) {
    presented.remove_suffix(1);
  }
  if (presented.empty() || presented.find_first_of(" \t") != std::string_view::npos) {
    return Token::kInvalid;
  }
  // Digests of equal length, every byte compared: the time says nothing of the token.
  const std::string digest = util::Sha256Raw(presented);
  unsigned char diff = 0;
  for (size_t i = 0; i < digest.size(); ++i) {
    diff |= static_cast<unsigned char>(digest[i] ^ token_digest_[i]);
  }
  return diff == 0 ? Token::kOk : Token::kInvalid;
}

}  // namespace tollgate::http
