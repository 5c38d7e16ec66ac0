#include <tollgate/http/request_head.hpp>

#include <cstring>

#include <tollgate/policy/policy.hpp>

namespace tollgate::http {
namespace {

using policy::Policy;

// RFC 9110 tchar.
constexpr std::array<bool, 256> kTokenChars = [] {
  std::array<bool, 256> t{};
  for (unsigned char c : std::string_view("!#$%&'*+-.^_`|~")) t[c] = true;
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = t[c - 'a' + 'A'] = true;
  return t;
}();

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!kTokenChars[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

// A request target: visible ASCII, no spaces or controls.
bool IsTarget(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

// A field value (already trimmed): visible characters, obs-text, spaces and tabs.
bool IsFieldValue(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\t') || u == 0x7f) return false;
  }
  return true;
}

// A comma-separated list of tokens, empty elements allowed (what Beast's parser requires of
// Connection).
bool IsTokenList(std::string_view value) {
  for (;;) {
    const size_t comma = value.find(',');
    const std::string_view element = Policy::Trim(value.substr(0, comma));
    if (!element.empty() && !IsToken(element)) return false;
    if (comma == std::string_view::npos) return true;
    value.remove_prefix(comma + 1);
  }
}

}  // namespace

std::string_view RequestHead::Get(std::string_view name) const {
  for (const Field& f : fields) {
    if (Policy::EqualsIgnoreCase(f.name, name)) return f.value;
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
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (Policy::EqualsIgnoreCase(Policy::Trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

HeadParse ParseRequestHead(std::string_view data, size_t max_size, RequestHead& out, size_t* size) {
  out.Clear();
  const char* const begin = data.data();
  const char* const end = begin + std::min(data.size(), max_size);
  const char* p = begin;
  // The next line, without its CRLF; false at the end of what may be read (or a bare LF).
  std::string_view line;
  bool bare_lf = false;
  auto next_line = [&]() {
    const auto* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (!nl) return false;
    if (nl == p || nl[-1] != '\r') {
      bare_lf = true;
      return false;
    }
    line = std::string_view(p, static_cast<size_t>(nl - 1 - p));
    p = nl + 1;
    return true;
  };
  auto incomplete = [&] {
    return bare_lf || data.size() >= max_size ? HeadParse::kNotSimple : HeadParse::kNeedMore;
  };

  if (!next_line()) return incomplete();
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return HeadParse::kNotSimple;
  out.method = line.substr(0, sp1);
  const std::string_view rest = line.substr(sp1 + 1);
  const size_t sp2 = rest.find(' ');
  if (sp2 == std::string_view::npos) return HeadParse::kNotSimple;
  out.target = rest.substr(0, sp2);
  const std::string_view version = rest.substr(sp2 + 1);
  if (version == "HTTP/1.1") {
    out.version = 11;
  } else if (version == "HTTP/1.0") {
    out.version = 10;
  } else {
    return HeadParse::kNotSimple;
  }
  if (!IsToken(out.method) || !IsTarget(out.target)) return HeadParse::kNotSimple;

  std::string_view connection;
  bool has_connection = false;
  for (;;) {
    if (!next_line()) return incomplete();
    if (line.empty()) break;  // the blank line
    if (line[0] == ' ' || line[0] == '\t') return HeadParse::kNotSimple;  // a folded line
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return HeadParse::kNotSimple;
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = Policy::Trim(line.substr(colon + 1));
    if (!IsToken(name) || !IsFieldValue(value) || out.fields.size() == RequestHead::kMaxFields) {
      return HeadParse::kNotSimple;
    }
    if (Policy::EqualsIgnoreCase(name, "Transfer-Encoding") || Policy::EqualsIgnoreCase(name, "Proxy-Connection")) {
      return HeadParse::kNotSimple;
    }
    if (Policy::EqualsIgnoreCase(name, "Content-Length")) {
      // No body, said explicitly; a body (or a second length) is for the general parser.
      if (out.content_length || value.empty() || value.find_first_not_of('0') != std::string_view::npos) {
        return HeadParse::kNotSimple;
      }
      out.content_length = 0;
    } else if (Policy::EqualsIgnoreCase(name, "Connection")) {
      if (has_connection || !IsTokenList(value)) return HeadParse::kNotSimple;
      has_connection = true;
      connection = value;
    }
    out.fields.push_back({name, value});
  }
  // As Beast's parser decides it: HTTP/1.1 stays open unless told "close", HTTP/1.0 closes
  // unless told "keep-alive".
  out.keep_alive = out.version >= 11 ? !HasToken(connection, "close") : HasToken(connection, "keep-alive");
  *size = static_cast<size_t>(p - begin);
  return HeadParse::kComplete;
}

}  // namespace tollgate::http
