// Which fields of a request or response the relay copies: the end-to-end ones, not those that
// describe one connection (RFC 9110 7.6.1), nor the framing, which the relay writes itself.
// Pure (no I/O); used by the forwarder and the upstream response head parser.
#pragma once

#include <algorithm>
#include <array>
#include <string_view>
#include <vector>

#include <tollgate/http/request_head.hpp>
#include <tollgate/util/ascii.hpp>
#include <tollgate/util/text.hpp>

namespace tollgate::http {

// Fields that describe one connection (RFC 9110 7.6.1), and the framing fields, which the relay
// writes itself for the body it sends.
enum class FieldKind { kEndToEnd, kConnection, kContentLength, kTransferEncoding, kOtherHopByHop };

inline FieldKind Classify(std::string_view name) {
  // By length first: this runs for every field of every proxied request and response, and
  // most fields have a length none of these has.
  auto is = [name](std::string_view f) { return util::EqualsIgnoreCase(name, f); };
  bool hop = false;
  switch (name.size()) {
    case 2:
      hop = is("TE");
      break;
    case 7:
      hop = is("Trailer") || is("Upgrade");
      break;
    case 10:
      if (is("Connection")) return FieldKind::kConnection;
      hop = is("Keep-Alive");
      break;
    case 14:
      return is("Content-Length") ? FieldKind::kContentLength : FieldKind::kEndToEnd;
    case 16:
      hop = is("Proxy-Connection");
      break;
    case 17:
      return is("Transfer-Encoding") ? FieldKind::kTransferEncoding : FieldKind::kEndToEnd;
    case 18:
      hop = is("Proxy-Authenticate");
      break;
    case 19:
      hop = is("Proxy-Authorization");
      break;
    default:
      break;
  }
  return hop ? FieldKind::kOtherHopByHop : FieldKind::kEndToEnd;
}

inline bool IsHopByHopOrFraming(std::string_view name) {
  return Classify(name) != FieldKind::kEndToEnd;
}

// Fields through which a proxy tells the upstream who the client is and how it reached the
// proxy (issue 31): every X-Forwarded-* (For, Host, Proto, Port, Prefix, Server, Scheme, Ssl,
// Uri, Method...), Forwarded (RFC 7239) and the client-address fields that common frameworks
// and CDNs read, and the original-URL fields that make some upstreams route elsewhere. In
// any case and with '_' for '-' (CGI, WSGI, PHP). Believed only from a trusted proxy: the
// forwarder drops them from any other peer (docs/http-contract.md, "Proxy headers").
inline bool IsProxyHeader(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "forwarded",
      "forwarded-for",
      "x-forwarded",
      "x-real-ip",
      "x-client-ip",
      "client-ip",
      "true-client-ip",
      "cf-connecting-ip",
      "cf-connecting-ipv6",
      "cf-pseudo-ipv4",
      "fastly-client-ip",
      "x-cluster-client-ip",
      "x-appengine-user-ip",
      "x-originating-ip",
      "x-remote-ip",
      "x-remote-addr",
      "x-proxyuser-ip",
      "x-original-forwarded-for",
      "x-url-scheme",
      "front-end-https",
      "x-original-url",
      "x-rewrite-url",
      "x-original-uri",
      "x-original-method",
      "x-original-host",
      "x-host",
      // Java's helpers, Envoy, Azure and Akamai (issue 31 review); Via names the proxies.
      "proxy-client-ip",
      "wl-proxy-client-ip",
      "x-envoy-external-address",
      "x-azure-clientip",
      "x-azure-socketip",
      "akamai-client-ip",
      "via",
  };
  if (ReadsAs(name, "x-forwarded-", true)) return true;
  // By length: a field is compared with the few names of its own length only (this runs for
  // every field of every forwarded request).
  static constexpr size_t kLongest = 32;
  static const auto by_length = [] {
    std::array<std::vector<std::string_view>, kLongest + 1> t;
    for (const std::string_view n : kNames) t[n.size()].push_back(n);
    return t;
  }();
  if (name.size() > kLongest) return false;
  const auto& same = by_length[name.size()];
  return std::any_of(same.begin(), same.end(),
                     [name](std::string_view n) { return ReadsAs(name, n); });
}

// Appends the end-to-end fields as "Name: value\r\n" lines. Dropped: hop-by-hop and framing
// fields, those named in Connection (but Host, which a request must carry), and those `skip`
// says the gateway sets itself.
// `for_each(fn)` calls fn(name, value) for each field, in order.
template <class ForEach, class Skip>
void AppendEndToEndFields(ForEach for_each, util::StringAppender& out, Skip skip) {
  std::vector<std::string_view> named;  // by Connection, other than close and keep-alive
  for_each([&named](std::string_view name, std::string_view v) {
    if (!util::EqualsIgnoreCase(name, "Connection")) return;
    util::AnyListElement(v, [&named](std::string_view token) {
      if (!token.empty() && !util::EqualsIgnoreCase(token, "close") &&
          !util::EqualsIgnoreCase(token, "keep-alive") && !util::EqualsIgnoreCase(token, "Host")) {
        named.push_back(token);
      }
      return false;  // every element
    });
  });
  for_each([&](std::string_view name, std::string_view value) {
    if (IsHopByHopOrFraming(name) || skip(name)) return;
    if (std::any_of(named.begin(), named.end(),
                    [name](std::string_view n) { return util::EqualsIgnoreCase(n, name); })) {
      return;
    }
    out << name << ": " << value << "\r\n";
  });
}

// The upstream's response head, when Beast's parser read it.
template <class Fields, class Skip>
void AppendEndToEnd(const Fields& f, util::StringAppender& out, Skip skip) {
  AppendEndToEndFields(
      [&f](auto fn) {
        for (const auto& field : f) fn(field.name_string(), field.value());
      },
      out, skip);
}

// The client's request head.
template <class Skip>
void AppendEndToEnd(const RequestHead& head, util::StringAppender& out, Skip skip) {
  AppendEndToEndFields(
      [&head](auto fn) {
        for (const RequestHead::Field& field : head.fields) fn(field.name, field.value);
      },
      out, skip);
}

// The methods an upstream's method-override support may run instead of a POST (issue 31), as
// named by header fields: X-HTTP-Method-Override, X-HTTP-Method and X-Method-Override (any case,
// '_' for '-'; Express's method-override, Rails, Symfony, ASP.NET Core). engine::StrictestRoute
// honours them on POST only and reads the `_method` query parameter itself. A `_method` in a
// form body is not read (bodies are streamed).
struct OverrideFields {
  const RequestHead& head;
  template <class Fn>
  void operator()(Fn&& fn) const {
    for (const RequestHead::Field& f : head.fields) {
      if (ReadsAs(f.name, "x-http-method-override") || ReadsAs(f.name, "x-http-method") ||
          ReadsAs(f.name, "x-method-override")) {
        util::AnyListElement(f.value, [&fn](std::string_view m) {
          if (!m.empty()) fn(m);
          return false;
        });
      }
    }
  }
};

}  // namespace tollgate::http
