#include <tollgate/http/request_head.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>

#include <tollgate/util/ascii.hpp>

namespace tollgate::http {
namespace {

using util::IsToken;
using util::kTokenChars;

constexpr bool IsVisibleAscii(unsigned char c) { return c > 0x20 && c < 0x7f; }

// RFC 3986 reg-name: unreserved and sub-delims (no '@' of userinfo, no '%', space or '/').
constexpr std::array<bool, 256> kRegNameChars = [] {
  std::array<bool, 256> t{};
  for (unsigned char c : std::string_view("-._~!$&'()*+,;=")) t[c] = true;
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = t[c - 'a' + 'A'] = true;
  return t;
}();

// A comma-separated list of tokens, empty elements allowed (what Beast's parser requires of
// Connection).
bool IsTokenList(std::string_view value) {
  return !util::AnyListElement(value, [](std::string_view e) { return !e.empty() && !IsToken(e); });
}

}  // namespace

size_t ForwardedHeadSize(const RequestHead& head) {
  constexpr size_t kLine = sizeof " HTTP/1.1\r\n" - 1 + 1;  // the spaces around the target too
  size_t n = head.method.size() + head.target.size() + kLine + 2;
  for (const RequestHead::Field& f : head.fields) n += f.name.size() + f.value.size() + 4;
  return n;
}

std::string_view RequestHead::Get(std::string_view name) const {
  for (const Field& f : fields) {
    if (util::EqualsIgnoreCase(f.name, name)) return f.value;
  }
  return {};
}

void RequestHead::Clear() {
  method = target = {};
  version = 11;
  keep_alive = true;
  chunked = false;
  content_length.reset();
  fields.clear();
}

bool HasToken(std::string_view value, std::string_view token) {
  return util::AnyListElement(
      value, [token](std::string_view e) { return util::EqualsIgnoreCase(e, token); });
}

bool ReadsAs(std::string_view name, std::string_view canonical, bool prefix) {
  if (prefix ? name.size() < canonical.size() : name.size() != canonical.size()) return false;
  for (size_t i = 0; i < canonical.size(); ++i) {
    auto fold = [](char c) {
      if (c == '_') return '-';
      return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (fold(name[i]) != fold(canonical[i])) return false;
  }
  return true;
}

bool IsValidHost(std::string_view host) {
  std::string_view name = host;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos || close < 3) return false;
    for (char c : host.substr(1, close - 1)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    }
    name = {};
    host.remove_prefix(close + 1);
    if (!host.empty() && host.front() != ':') return false;
  } else {
    const size_t colon = host.find(':');
    name = host.substr(0, colon);
    host = colon == std::string_view::npos ? std::string_view() : host.substr(colon);
    for (char c : name) {
      if (!kRegNameChars[static_cast<unsigned char>(c)]) return false;
    }
  }
  if (host.empty()) return true;
  host.remove_prefix(1);  // ':'
  if (host.size() > 5) return false;
  for (char c : host) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

const char* CheckRequestHead(const RequestHead& head, std::string_view* host) {
  size_t hosts = 0;
  size_t codings = 0;
  bool chunked_only = true;
  *host = {};
  for (const RequestHead::Field& f : head.fields) {
    if (f.name.size() == 4 && util::EqualsIgnoreCase(f.name, "Host")) {
      ++hosts;
      *host = f.value;
    } else if (f.name.size() == 17 && util::EqualsIgnoreCase(f.name, "Transfer-Encoding")) {
      // Every line and every element of each: "chunked" once, nothing else.
      util::AnyListElement(f.value, [&](std::string_view coding) {
        ++codings;
        if (!util::EqualsIgnoreCase(coding, "chunked")) chunked_only = false;
        return false;
      });
    }
  }
  if (codings > 0 && (codings > 1 || !chunked_only || head.version < 11))
    return "invalid_transfer_encoding";
  if (hosts > 1 || (hosts == 0 && head.version >= 11) || !IsValidHost(*host)) return "invalid_host";
  return nullptr;
}

namespace {

// Adds one field of the simple shape to `out`, or says the head is not that shape: framing the
// general parser must judge (Transfer-Encoding, a body, a second length or Connection field).
bool KeepField(std::string_view name, std::string_view value, RequestHead& out,
               std::optional<std::string_view>& connection, size_t max_fields) {
  if (out.fields.size() >= std::min(max_fields, RequestHead::kMaxFields)) return false;
  if (util::EqualsIgnoreCase(name, "Transfer-Encoding") ||
      util::EqualsIgnoreCase(name, "Proxy-Connection")) {
    return false;
  }
  if (util::EqualsIgnoreCase(name, "Content-Length")) {
    // No body, said explicitly; a body (or a second length) is for the general parser.
    if (out.content_length || value.empty() ||
        value.find_first_not_of('0') != std::string_view::npos) {
      return false;
    }
    out.content_length = 0;
  } else if (util::EqualsIgnoreCase(name, "Connection")) {
    if (connection || !IsTokenList(value)) return false;
    connection = value;
  }
  out.fields.push_back({name, value});
  return true;
}

}  // namespace

HeadParse ParseRequestHead(std::string_view data, size_t max_size, RequestHead& out, size_t* size,
                           size_t max_fields) {
  out.Clear();
  // One pass over the bytes, each checked once as it is scanned (a head is read per request).
  using Byte = unsigned char;
  const auto* const begin = reinterpret_cast<const Byte*>(data.data());
  const auto* const end = begin + std::min(data.size(), max_size);
  const Byte* p = begin;
  auto view = [](const Byte* from, const Byte* to) {
    return std::string_view(reinterpret_cast<const char*>(from), static_cast<size_t>(to - from));
  };
  // The bytes ran out before the head did: more may come, unless the limit is reached.
  auto out_of_bytes = [&] {
    return data.size() >= max_size ? HeadParse::kNotSimple : HeadParse::kNeedMore;
  };

  // "METHOD SP target SP HTTP/1.x CRLF"
  const Byte* const method = p;
  while (p < end && kTokenChars[*p]) ++p;
  if (p == end) return out_of_bytes();
  if (p == method || *p != ' ') return HeadParse::kNotSimple;
  out.method = view(method, p++);
  const Byte* const target = p;
  while (p < end && IsVisibleAscii(*p)) ++p;
  if (p == end) return out_of_bytes();
  if (p == target || *p != ' ') return HeadParse::kNotSimple;
  out.target = view(target, p++);
  static constexpr std::string_view kVersion = "HTTP/1.";
  if (end - p < static_cast<std::ptrdiff_t>(kVersion.size() + 3)) return out_of_bytes();
  if (view(p, p + kVersion.size()) != kVersion || (p[7] != '0' && p[7] != '1') || p[8] != '\r' ||
      p[9] != '\n') {
    return HeadParse::kNotSimple;
  }
  out.version = p[7] == '1' ? 11 : 10;
  p += kVersion.size() + 3;

  std::optional<std::string_view> connection;
  for (;;) {
    if (end - p < 2) return out_of_bytes();
    if (*p == '\r') {  // the blank line
      if (p[1] != '\n') return HeadParse::kNotSimple;
      p += 2;
      break;
    }
    // "name:" with a token name; a folded line starts with a space, which is not a token byte.
    const Byte* const name_begin = p;
    while (p < end && kTokenChars[*p]) ++p;
    if (p == end) return out_of_bytes();
    if (p == name_begin || *p != ':') return HeadParse::kNotSimple;
    const std::string_view name = view(name_begin, p++);
    // The value, without optional whitespace around it: visible bytes, obs-text, spaces and
    // tabs, up to CRLF (a bare LF or any other control byte is not this shape).
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    const Byte* const value_begin = p;
    while (p < end && (*p >= 0x20 ? *p != 0x7f : *p == '\t')) ++p;
    if (end - p < 2) return out_of_bytes();
    if (p[0] != '\r' || p[1] != '\n') return HeadParse::kNotSimple;
    const Byte* value_end = p;
    while (value_end > value_begin && (value_end[-1] == ' ' || value_end[-1] == '\t')) --value_end;
    const std::string_view value = view(value_begin, value_end);
    p += 2;

    if (!KeepField(name, value, out, connection, max_fields)) return HeadParse::kNotSimple;
  }
  // As Beast's parser decides it: HTTP/1.1 stays open unless told "close", HTTP/1.0 closes
  // unless told "keep-alive".
  out.keep_alive = out.version >= 11 ? !HasToken(connection.value_or(""), "close")
                                     : HasToken(connection.value_or(""), "keep-alive");
  *size = static_cast<size_t>(p - begin);
  return HeadParse::kComplete;
}

}  // namespace tollgate::http
