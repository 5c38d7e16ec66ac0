#include "h2_head.hpp"

#include <tollgate/util/ascii.hpp>

namespace tollgate::http {

namespace {

// A field value as RFC 9113 8.2.1 allows it: no NUL, CR or LF (nor any other control byte but
// HTAB, which HTTP/1.1 would not take either), and no white space at either end.
bool IsFieldValue(std::string_view v) {
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return v.empty() ||
         (v.front() != ' ' && v.front() != '\t' && v.back() != ' ' && v.back() != '\t');
}

// A field name: a token in lower case (RFC 9113 8.2.1: upper case is malformed).
bool IsFieldName(std::string_view n) {
  if (!util::IsToken(n)) return false;
  for (const char c : n) {
    if (c >= 'A' && c <= 'Z') return false;
  }
  return true;
}

// A request target or authority: visible ASCII only (a space would end the request line).
bool IsVisible(std::string_view s) {
  if (s.empty()) return false;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

bool IsConnectionSpecific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade" || name == "http2-settings";
}

struct Pseudo {
  std::string_view method, scheme, authority, path;
  bool seen_method = false, seen_scheme = false, seen_authority = false, seen_path = false;
};

// One pseudo-header field into `p`; false when unknown or repeated.
bool TakePseudo(const H2Field& f, Pseudo& p) {
  auto take = [&](std::string_view& to, bool& seen) {
    if (seen) return false;
    seen = true;
    to = f.value;
    return true;
  };
  if (f.name == ":method") return take(p.method, p.seen_method);
  if (f.name == ":scheme") return take(p.scheme, p.seen_scheme);
  if (f.name == ":authority") return take(p.authority, p.seen_authority);
  if (f.name == ":path") return take(p.path, p.seen_path);
  return false;  // :status, :protocol (extended CONNECT is not offered), or unknown
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && util::EqualsIgnoreCase(s.substr(0, prefix.size()), prefix);
}

}  // namespace

H2HeadResult RenderH1Request(std::span<const H2Field> fields, bool has_body, std::string& out,
                             H2Request& request) {
  Pseudo p;
  size_t i = 0;
  for (; i < fields.size() && !fields[i].name.empty() && fields[i].name[0] == ':'; ++i) {
    if (!TakePseudo(fields[i], p)) return H2HeadResult::kMalformed;
  }
  if (!p.seen_method || !util::IsToken(p.method)) return H2HeadResult::kMalformed;
  const bool connect = p.method == "CONNECT";
  // RFC 9113 8.3.1: :scheme and :path with every method but CONNECT, which has neither.
  if (connect ? (p.seen_scheme || p.seen_path || !p.seen_authority)
              : (!p.seen_scheme || !p.seen_path || !IsVisible(p.path)))
    return H2HeadResult::kMalformed;
  // RFC 9113 8.3.1: the origin form, or `*` for OPTIONS; an absolute URI (whose authority would
  // vie with :authority) or a relative one is refused.
  if (!connect && !p.path.starts_with('/') && !(p.path == "*" && p.method == "OPTIONS"))
    return H2HeadResult::kMalformed;
  if (p.seen_authority && !IsVisible(p.authority)) return H2HeadResult::kMalformed;
  if (p.seen_scheme && !util::IsToken(p.scheme)) return H2HeadResult::kMalformed;
  out.append(p.method).append(" ").append(connect ? p.authority : p.path).append(" HTTP/1.1\r\n");
  if (p.seen_authority) out.append("Host: ").append(p.authority).append("\r\n");
  std::string cookie;
  bool has_length = false, has_host = false;
  for (; i < fields.size(); ++i) {
    const H2Field& f = fields[i];
    // A pseudo-header after a regular field, a bad name or value, a connection's own field.
    if (!IsFieldName(f.name) || !IsFieldValue(f.value) || IsConnectionSpecific(f.name))
      return H2HeadResult::kMalformed;
    if (f.name == "te") {
      if (f.value != "trailers") return H2HeadResult::kMalformed;
      continue;  // a hop's (HTTP/1.1 would need it in Connection): the proxy sets its own
    }
    if (f.name == "host") {
      if (has_host || (p.seen_authority && f.value != p.authority)) return H2HeadResult::kMalformed;
      has_host = true;
      if (p.seen_authority) continue;
    } else if (f.name == "cookie") {
      if (!cookie.empty()) cookie.append("; ");
      cookie.append(f.value);
      continue;
    } else if (f.name == "expect") {
      continue;
    } else if (f.name == "content-length") {
      if (has_length) return H2HeadResult::kMalformed;
      has_length = true;
    } else if (f.name == "content-type") {
      request.grpc = StartsWithIgnoreCase(f.value, "application/grpc");
    }
    out.append(f.name).append(": ").append(f.value).append("\r\n");
  }
  if (!cookie.empty()) out.append("cookie: ").append(cookie).append("\r\n");
  request.chunked = has_body && !has_length;
  if (request.chunked) out.append("Transfer-Encoding: chunked\r\n");
  out.append("\r\n");
  request.method = std::string(p.method);
  return H2HeadResult::kOk;
}

bool CrossesToH2(std::string_view name, std::string_view connection) {
  using util::EqualsIgnoreCase;
  for (std::string_view own :
       {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}) {
    if (EqualsIgnoreCase(name, own)) return false;
  }
  while (!connection.empty()) {
    const size_t comma = connection.find(',');
    if (EqualsIgnoreCase(util::Trim(connection.substr(0, comma)), name)) return false;
    if (comma == std::string_view::npos) break;
    connection.remove_prefix(comma + 1);
  }
  return true;
}

int GrpcStatusOf(int http_status) {
  switch (http_status) {
    case 400:
      return 13;  // INTERNAL
    case 401:
      return 16;  // UNAUTHENTICATED
    case 403:
      return 7;  // PERMISSION_DENIED
    case 404:
      return 12;  // UNIMPLEMENTED
    case 429:
      return 8;  // RESOURCE_EXHAUSTED (gRPC's table says UNAVAILABLE: see above)
    case 502:
    case 503:
    case 504:
      return 14;  // UNAVAILABLE
    default:
      return 2;  // UNKNOWN
  }
}

std::string GrpcMessage(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace tollgate::http
