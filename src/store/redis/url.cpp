#include "store/redis/url.hpp"

#include <charconv>

#include <tollgate/util/host_port.hpp>

namespace tollgate::store::redis {
namespace {

struct Scheme {
  std::string_view prefix;
  bool cluster;
  bool tls;
  bool sentinel = false;
};
constexpr Scheme kSchemes[] = {
    {"redis://", false, false},
    {"redis-cluster://", true, false},
    {"rediss://", false, true},
    {"rediss-cluster://", true, true},
    {"redis-sentinel://", false, false, true},
};

// "[user:]password@" at the front of `rest`, removed from it.
void TakeCredentials(std::string_view& rest, Url& out) {
  const size_t at = rest.rfind('@');
  if (at == std::string_view::npos) return;
  const std::string_view cred = rest.substr(0, at);
  const size_t colon = cred.find(':');
  if (colon == std::string_view::npos) {
    out.password = std::string(cred);
  } else {
    out.user = std::string(cred.substr(0, colon));
    out.password = std::string(cred.substr(colon + 1));
  }
  rest = rest.substr(at + 1);
}

// "[[user:]password@]MASTER@" at the front of `rest`, removed from it (redis-sentinel://). The
// name ends at the last '@': a password may hold one, a name may not (nor a space: the
// sentinels' +switch-master messages separate their fields with spaces).
core::Result<bool> TakeMasterName(std::string_view& rest, Url& out) {
  const size_t at = rest.rfind('@');
  if (at == std::string_view::npos) {
    return core::Error{
        "store.url: expected redis-sentinel://[user:password@]MASTER@host:port[,host:port...], "
        "got no master name"};
  }
  std::string_view front = rest.substr(0, at);
  rest = rest.substr(at + 1);
  const size_t cred = front.rfind('@');
  out.master_name = std::string(cred == std::string_view::npos ? front : front.substr(cred + 1));
  if (cred != std::string_view::npos) {
    front = front.substr(0, cred + 1);
    TakeCredentials(front, out);
  }
  if (out.master_name.empty()) return core::Error{"store.url: empty master name"};
  for (unsigned char c : out.master_name) {
    if (c <= ' ' || c == 127) {
      return core::Error{"store.url: bad master name '" + out.master_name + "'"};
    }
  }
  return true;
}

// "/db" at the end of `rest`, removed from it. An empty db is 0.
core::Result<bool> TakeDatabase(std::string_view& rest, Url& out) {
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return true;
  const std::string_view db = rest.substr(slash + 1);
  rest = rest.substr(0, slash);
  if (db.empty()) return true;
  const auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), out.db);
  if (ec != std::errc() || p != db.data() + db.size() || out.db < 0) {
    return core::Error{"store.url: bad database number '" + std::string(db) + "'"};
  }
  if (out.cluster && out.db != 0)
    return core::Error{"store.url: Redis Cluster has only database 0"};
  return true;
}

// "host:port[,host:port...]".
core::Result<bool> TakeNodes(std::string_view rest, Url& out) {
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    auto node = ParseHostPort(rest.substr(0, comma));
    if (!node) return core::Error{node.error()};
    if (node->host.empty()) {
      return core::Error{"store.url: expected host:port, got '" +
                         std::string(rest.substr(0, comma)) + "'"};
    }
    out.nodes.push_back(*node);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (out.nodes.empty()) return core::Error{"store.url: no host"};
  if (!out.cluster && !out.sentinel && out.nodes.size() > 1)
    return core::Error{"store.url: one host for redis://"};
  return true;
}

}  // namespace

core::Result<NodeAddress> ParseHostPort(std::string_view s) {
  auto hp = util::SplitHostPort(s);
  if (!hp) return core::Error{"store.url: expected host:port, got '" + std::string(s) + "'"};
  return NodeAddress{std::move(hp->host), std::move(hp->port)};
}

core::Result<Url> ParseUrl(std::string_view url) {
  Url out;
  std::string_view rest;
  const Scheme* scheme = nullptr;
  for (const Scheme& s : kSchemes) {
    if (url.rfind(s.prefix, 0) == 0) scheme = &s;
  }
  if (!scheme) {
    return core::Error{
        "store.url: must start with redis://, rediss://, redis-cluster://, rediss-cluster:// or "
        "redis-sentinel://, got '" +
        std::string(url) + "'"};
  }
  out.cluster = scheme->cluster;
  out.tls = scheme->tls;
  out.sentinel = scheme->sentinel;
  rest = url.substr(scheme->prefix.size());
  if (out.sentinel) {
    if (auto name = TakeMasterName(rest, out); !name) return core::Error{name.error()};
  } else {
    TakeCredentials(rest, out);
  }
  if (auto db = TakeDatabase(rest, out); !db) return core::Error{db.error()};
  if (auto nodes = TakeNodes(rest, out); !nodes) return core::Error{nodes.error()};
  return out;
}

}  // namespace tollgate::store::redis
