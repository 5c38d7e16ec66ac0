// libtollgate: the limiter embedded in a C++ service. One header; no HTTP library, no I/O.
//
//   auto limiter = tollgate::Limiter::FromYaml(yaml_text);    // or FromFile(path)
//   tollgate::Answer a = limiter->Check({.api_key = key, .method = "GET", .path = "/v1/x"});
//   if (!a.allowed) reply(a.status, a.headers, a.body);
//
// The same configuration, plans, keys, routes and response contract as the gateway
// (docs/configuration.md, docs/http-contract.md), on the in-memory store.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tollgate/core/result.hpp>

namespace tollgate {

struct Request {
  std::string_view api_key;  // as presented (no "Bearer "); empty: anonymous
  std::string_view method = "GET";
  std::string_view path = "/";      // the request target with its query string (costs read it:
                                    // "/export?pages=120"), made canonical as the gateway does
                                    // (docs/http-contract.md); one it cannot is a 400
  std::string_view client_address;  // for `identity: ip` routes and invalid-key limiting
};

struct Answer {
  bool allowed = true;
  int status = 200;  // 200, 400, 401, 403 (the configured deny list: code "blocked") or 429
  std::string code;  // "" when allowed; rate_limited, invalid_api_key,
                     // invalid_request_target, ...
  std::vector<std::pair<std::string, std::string>> headers;  // rate-limit headers, Retry-After,
                                                             // WWW-Authenticate (401)
  std::string body;    // the JSON body to send when not allowed
  std::string key_id;  // the key's id (never the key), when known
};

// Thread-safe: Check() may be called from any thread.
class Limiter {
 public:
  static core::Result<std::unique_ptr<Limiter>> FromYaml(const std::string& yaml);
  static core::Result<std::unique_ptr<Limiter>> FromFile(const std::string& path);
  ~Limiter();

  // Decides (and consumes on success) one request.
  Answer Check(const Request& request);

  struct Impl;  // defined in src/embed/limiter.cpp

 private:
  explicit Limiter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate
