// The store's URL: redis://, rediss://, redis-cluster://, rediss-cluster:// and redis-sentinel://.
#pragma once

#include <string>
#include <string_view>
#include <tollgate/core/result.hpp>
#include <tuple>
#include <vector>

namespace tollgate::store::redis {

// A Redis node as a URL or the cluster names it. The port stays text: the resolver takes it.
struct NodeAddress {
  std::string host;
  std::string port;
  bool operator<(const NodeAddress& o) const {
    return std::tie(host, port) < std::tie(o.host, o.port);
  }
  bool operator==(const NodeAddress& o) const = default;
};

// What a URL says (RedisStoreOptions::url).
struct Url {
  bool cluster = false;            // redis-cluster:// and rediss-cluster://
  bool sentinel = false;           // redis-sentinel://
  bool tls = false;                // rediss:// and rediss-cluster://
  std::vector<NodeAddress> nodes;  // the server; a cluster's seeds of the slot map; the sentinels
  std::string master_name;         // redis-sentinel://: the master the sentinels know by this name
  std::string user;                // empty: AUTH with the password alone
  std::string password;            // empty: no AUTH
  int db = 0;                      // SELECTed when not 0; always 0 on a cluster
};

// "host:port", split at the last ':' (so "::1:6379" is host "::1"; "[::1]:6379" too) by
// util::SplitHostPort. The port is required; an empty host is returned as it is (a redirect's
// ":6380" means "the node that answered"; a URL refuses it). Errors name the field:
// "store.url: expected host:port, got '...'".
core::Result<NodeAddress> ParseHostPort(std::string_view s);

// redis://[[user:]password@]host:port[/db], rediss://... the same over TLS,
// redis-cluster://[[user:]password@]host:port[,host:port...] (rediss-cluster:// over TLS), and
// redis-sentinel://[[user:]password@]MASTER@host:port[,host:port...][/db]: the sentinels, which
// name the master known as MASTER (the credentials and database are the master's; the
// sentinels are asked without AUTH). The credentials end at the last '@' (with Sentinel, the
// last '@' before the master's name); the user, if any, at the first ':' before it.
core::Result<Url> ParseUrl(std::string_view url);

}  // namespace tollgate::store::redis
