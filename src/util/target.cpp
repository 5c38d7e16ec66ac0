#include <array>
#include <boost/url/authority_view.hpp>
#include <cstdint>
#include <cstring>
#include <tollgate/util/target.hpp>

#include <tollgate/util/ascii.hpp>

namespace tollgate::util {
namespace {

namespace urls = boost::urls;

using Byte = unsigned char;

// What a 400 says (the gateway answers {"code":"invalid_request_target"} and logs this).
constexpr const char* kEmpty = "empty request target";
constexpr const char* kConnect = "CONNECT (authority-form) is not supported";
constexpr const char* kAsterisk = "'*' is only for OPTIONS";
constexpr const char* kNotOriginForm = "not origin-form, absolute-form or '*'";
constexpr const char* kScheme = "scheme is not http or https";
constexpr const char* kUserinfo = "userinfo in the authority";
constexpr const char* kAuthority = "invalid authority";
constexpr const char* kEmptyHost = "empty host";
constexpr const char* kEncodedHost = "percent-encoding in the host";
constexpr const char* kPort = "invalid port";
constexpr const char* kFragment = "fragment ('#')";
constexpr const char* kBackslash = "backslash";
constexpr const char* kControl = "space, control or non-ASCII byte";
constexpr const char* kMalformed = "'%' not followed by two hex digits";
constexpr const char* kEncodedControl = "encoded control byte";
constexpr const char* kEncodedSlash = "encoded '/' or '\\' in the path";
constexpr const char* kParameters = "';' in the path";
constexpr const char* kHiddenDots = "dot segment behind ';', %3B, %2F or %5C";
constexpr const char* kLookalike = "encoded look-alike of '.', '/' or '\\' in the path";

bool IsVisible(Byte c) { return c > 0x20 && c < 0x7f; }

// RFC 3986 unreserved: ALPHA DIGIT - . _ ~
constexpr std::array<bool, 256> kUnreserved = [] {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = t[c - 'a' + 'A'] = true;
  for (Byte c : std::string_view("-._~")) t[c] = true;
  return t;
}();

// Bytes copied as they are by the full rewrite: visible ASCII but '%', '\', '#' and ';'.
constexpr std::array<bool, 256> kCopied = [] {
  std::array<bool, 256> t{};
  for (int c = 0x21; c < 0x7f; ++c) t[c] = true;
  for (Byte c : std::string_view("%\\#;")) t[c] = false;
  return t;
}();

// The fast path's classes of a path byte: kept, a separator, the start of the query, or
// anything that needs the full rewrite ('%', ';', '\', '#', and what is refused).
enum : uint8_t { kPlain, kSlash, kQuestion, kOther };
constexpr std::array<uint8_t, 256> kFastPath = [] {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = kCopied[c] ? kPlain : kOther;
  t['/'] = kSlash;
  t['?'] = kQuestion;
  return t;
}();

constexpr std::array<int8_t, 256> kHexValue = [] {
  std::array<int8_t, 256> t{};
  t.fill(-1);
  for (int c = '0'; c <= '9'; ++c) t[c] = static_cast<int8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[c] = t[c - 'a' + 'A'] = static_cast<int8_t>(c - 'a' + 10);
  return t;
}();
constexpr char kHexDigits[] = "0123456789ABCDEF";

// `p` is at a '.' just after a '/': whether the segment is "." or "..".
bool IsDotSegmentAt(const Byte* p, const Byte* end) {
  ++p;
  if (p < end && *p == '.') ++p;
  return p == end || *p == '/' || *p == '?';
}

// The exact fast-path test of a path [p, end) that starts with '/' and holds no '?': only kPlain
// bytes and separators, and no empty, "." or ".." segment.
bool IsCanonicalPath(const Byte* p, const Byte* end) {
  for (; p < end; ++p) {
    const uint8_t k = kFastPath[*p];
    if (k == kPlain) continue;
    if (k != kSlash) return false;
    if (p + 1 < end && (p[1] == '/' || (p[1] == '.' && IsDotSegmentAt(p + 1, end)))) return false;
  }
  return true;
}

#if defined(__GNUC__)
// Sixteen bytes at a time, in GCC's generic vectors (SSE2 on x86-64, NEON on arm64): the fast
// path runs on every proxied request, and a byte at a time cost ~9 instructions per byte.
using Block = Byte __attribute__((vector_size(16)));
constexpr size_t kBlock = sizeof(Block);

[[gnu::always_inline]] inline Block Load(const Byte* p) {
  Block b;
  std::memcpy(&b, p, sizeof b);
  return b;
}

template <class Mask>
[[gnu::always_inline]] inline bool Any(Mask m) {
  uint64_t half[2];
  std::memcpy(half, &m, sizeof half);
  return (half[0] | half[1]) != 0;
}

// Whether a byte of `b` is outside visible ASCII or one of '%', '\', '#'.
[[gnu::always_inline]] inline auto QueryMask(Block b) {
  return (Block(b - 0x21) > 0x7e - 0x21) | (b == '%') | (b == '\\') | (b == '#');
}

// For each byte of `b` and the byte before it in `before`: what the path's fast test looks at
// (';', or a '/' followed by '/' or '.': an empty or perhaps a dot segment). Conservative.
[[gnu::always_inline]] inline bool PathBlockNeedsALook(Block before, Block b) {
  return Any(QueryMask(b) | (b == ';') | ((before == '/') & ((b == '/') | (b == '.'))));
}

// The path [begin, end): begin[0] is '/', no '?'. Never reads outside it: a short one is
// copied, padded with a plain byte; the last block of a long one overlaps the one before.
bool PathNeedsALook(const Byte* begin, const Byte* end) {
  const size_t n = static_cast<size_t>(end - begin);
  if (n <= kBlock) {
    Byte padded[kBlock + 1];
    std::memset(padded, 'a', sizeof padded);
    std::memcpy(padded, begin, n);
    return PathBlockNeedsALook(Load(padded), Load(padded + 1));
  }
  const Byte* p = begin + 1;  // each block with the byte before it; begin[0] is the '/'
  for (; static_cast<size_t>(end - p) >= kBlock; p += kBlock) {
    if (PathBlockNeedsALook(Load(p - 1), Load(p))) return true;
  }
  return p < end && PathBlockNeedsALook(Load(end - kBlock - 1), Load(end - kBlock));
}

bool IsCanonicalQueryFast(const Byte* p, const Byte* end) {
  const size_t n = static_cast<size_t>(end - p);
  if (n < kBlock) {
    Byte padded[kBlock];
    std::memset(padded, 'a', sizeof padded);
    std::memcpy(padded, p, n);
    return !Any(QueryMask(Load(padded)));
  }
  for (; static_cast<size_t>(end - p) >= kBlock; p += kBlock) {
    if (Any(QueryMask(Load(p)))) return false;
  }
  return p == end || !Any(QueryMask(Load(end - kBlock)));
}
#else
bool PathNeedsALook(const Byte*, const Byte*) { return true; }
bool IsCanonicalQueryFast(const Byte* p, const Byte* end) {
  for (; p < end; ++p) {
    if (!kCopied[*p] && *p != ';') return false;
  }
  return true;
}
#endif

// The fast path: whether `raw` is origin-form that the full rewrite would leave unchanged (see
// CanonicalizeTarget). Sets `qmark` to the position of the '?' or npos.
bool IsCanonical(std::string_view raw, size_t& qmark) {
  if (raw.empty() || raw.front() != '/') return false;
  const Byte* const begin = reinterpret_cast<const Byte*>(raw.data());
  const Byte* const end = begin + raw.size();
  const Byte* path_end = static_cast<const Byte*>(std::memchr(begin, '?', raw.size()));
  qmark = path_end ? static_cast<size_t>(path_end - begin) : std::string_view::npos;
  if (!path_end) path_end = end;
  // Paths with a segment that starts with '.' (".well-known") take the exact look.
  if (PathNeedsALook(begin, path_end) && !IsCanonicalPath(begin, path_end)) return false;
  return path_end == end || IsCanonicalQueryFast(path_end + 1, end);
}

// Copies `in` (a path, or a query when !kPath) to `out`, decoding the %XX of unreserved
// characters and uppercasing the hex of the others, and refusing what the contract refuses.
// Never writes more bytes than it reads.
template <bool kPath>
const char* Decode(std::string_view in, const TargetOptions& options, char*& out) {
  const Byte* p = reinterpret_cast<const Byte*>(in.data());
  const Byte* const end = p + in.size();
  char* w = out;
  while (p < end) {
    const Byte c = *p;
    if (kCopied[c]) {
      *w++ = static_cast<char>(c);
      ++p;
    } else if (c == '%') {
      const int hi = end - p > 2 ? kHexValue[p[1]] : -1;
      const int lo = end - p > 2 ? kHexValue[p[2]] : -1;
      if (hi < 0 || lo < 0) return kMalformed;
      const Byte v = static_cast<Byte>((hi << 4) | lo);
      if (kPath && (v < 0x20 || v == 0x7f)) return kEncodedControl;  // the query carries form text
      if (kUnreserved[v]) {
        *w++ = static_cast<char>(v);
      } else {
        if (kPath && (v == '/' || v == '\\') && !options.allow_encoded_slash) return kEncodedSlash;
        *w++ = '%';
        *w++ = kHexDigits[hi];
        *w++ = kHexDigits[lo];
      }
      p += 3;
    } else if (c == ';') {
      if (kPath && !options.allow_path_parameters) return kParameters;
      *w++ = ';';
      ++p;
    } else if (c == '#') {
      return kFragment;
    } else if (c == '\\') {
      return kBackslash;
    } else {
      return kControl;
    }
  }
  out = w;
  return nullptr;
}

bool IsDots(std::string_view s) { return s == "." || s == ".."; }

// Whether the decoded path (hex uppercased) holds the UTF-8 of a character that Unicode
// normalisation (NFKC) or a "best fit" code page turns into '.', '/' or '\' (issue 31): an
// upstream that normalises before routing would see dot segments or separators in it.
bool HasLookalikeSeparator(std::string_view path) {
  static constexpr std::string_view kForms[] = {
      "%EF%BC%8E",  // U+FF0E FULLWIDTH FULL STOP
      "%EF%BC%8F",  // U+FF0F FULLWIDTH SOLIDUS
      "%EF%BC%BC",  // U+FF3C FULLWIDTH REVERSE SOLIDUS
      "%E2%80%A4",  // U+2024 ONE DOT LEADER
      "%E2%80%A5",  // U+2025 TWO DOT LEADER
      "%EF%B9%92",  // U+FE52 SMALL FULL STOP
      "%EF%B9%A8",  // U+FE68 SMALL REVERSE SOLIDUS
      "%E2%88%95",  // U+2215 DIVISION SLASH
      "%E2%81%84",  // U+2044 FRACTION SLASH
      "%E2%80%A6",  // U+2026 HORIZONTAL ELLIPSIS ("...")
      // Overlong UTF-8 of '.', '/' and '\', which lax decoders read as the ASCII byte.
      "%C0%AE",
      "%C0%AF",
      "%C1%9C",
      "%E0%80%AE",
      "%E0%80%AF",
      "%E0%81%9C",
  };
  for (size_t at = path.find("%"); at != std::string_view::npos; at = path.find("%", at + 1)) {
    const std::string_view rest = path.substr(at);
    for (const std::string_view form : kForms) {
      if (rest.starts_with(form)) return true;
    }
  }
  return false;
}

// Whether a segment hides a "." or ".." from an upstream that splits it at ';' (Tomcat and
// Spring strip parameters: "/..;/admin"), at an encoded ';' (decoded first, then stripped: why
// Spring Security's firewall refuses "%3B"), or at %2F and %5C decoded into separators.
bool HidesDotSegment(std::string_view segment) {
  size_t piece = 0;
  for (size_t i = 0; i < segment.size();) {
    size_t separator = 0;
    if (segment[i] == ';') {
      separator = 1;
    } else if (segment[i] == '%') {
      const std::string_view escape = segment.substr(i, 3);
      separator = escape == "%3B" || escape == "%2F" || escape == "%5C" ? 3 : 0;
    }
    if (separator == 0) {
      ++i;
      continue;
    }
    if (IsDots(segment.substr(piece, i - piece))) return true;
    i += separator;
    piece = i;
  }
  return piece != 0 && IsDots(segment.substr(piece));
}

// Merges repeated slashes, then removes dot segments (RFC 3986 §5.2.4), in place, in the decoded
// path [begin, end) that starts with '/'. Merging first is what nginx does ("/a//../b" is "/b"),
// and it means an upstream that merges or not sees the same path. Sets `end` to the new end.
const char* RemoveDotSegments(char* begin, char*& end) {
  char* w = begin;  // the output is [begin, w), never longer than what was read
  const char* r = begin;
  bool trailing_slash = false;
  while (r < end) {  // at a '/'
    const char* const s = r + 1;
    const char* e = static_cast<const char*>(std::memchr(s, '/', static_cast<size_t>(end - s)));
    if (e == nullptr) e = end;
    const std::string_view segment(s, static_cast<size_t>(e - s));
    trailing_slash = segment.empty() || IsDots(segment);
    if (segment == "..") {
      while (w > begin && *--w != '/') {
      }
    } else if (!trailing_slash) {
      if (HidesDotSegment(segment)) return kHiddenDots;
      *w++ = '/';
      std::memmove(w, s, segment.size());
      w += segment.size();
    }
    r = e;
  }
  // "/a/b/.." is "/a/" and "/a//" is "/a/": a final empty or dot segment leaves its slash.
  if (trailing_slash || w == begin) *w++ = '/';
  end = w;
  return nullptr;
}

// "http://host:8080/p?q" -> authority "host:8080", rest "/p?q". Boost.URL parses the authority
// (IPv6 literals, ports, userinfo); what it accepts but an HTTP authority may not hold is
// refused here.
const char* SplitAbsoluteForm(std::string_view raw, std::string_view& authority,
                              std::string_view& rest) {
  const size_t colon = raw.find(':');
  if (colon == std::string_view::npos || raw.substr(colon + 1, 2) != "//") return kNotOriginForm;
  const std::string_view scheme = raw.substr(0, colon);
  if (!EqualsIgnoreCase(scheme, "http") && !EqualsIgnoreCase(scheme, "https")) return kScheme;
  const size_t start = colon + 3;
  const size_t stop = raw.find_first_of("/?#", start);
  authority =
      raw.substr(start, stop == std::string_view::npos ? std::string_view::npos : stop - start);
  rest = stop == std::string_view::npos ? std::string_view() : raw.substr(stop);
  for (const char c : authority) {
    if (c == '\\') return kBackslash;
    if (!IsVisible(static_cast<Byte>(c))) return kControl;
  }
  const auto parsed = urls::parse_authority(authority);
  if (!parsed) return kAuthority;
  if (parsed->has_userinfo()) return kUserinfo;
  switch (parsed->host_type()) {
    case urls::host_type::name:
    case urls::host_type::ipv4:
    case urls::host_type::ipv6:
      break;
    default:
      return kAuthority;
  }
  const std::string_view host = parsed->encoded_host();
  if (host.empty()) return kEmptyHost;
  // It becomes the Host field, which is never percent-decoded.
  if (host.find('%') != std::string_view::npos) return kEncodedHost;
  if (parsed->has_port()) {
    // Not port_number(): Boost.URL 1.81 returns 99999 modulo 65536 there.
    const std::string_view port = parsed->port();
    if (port.empty() || port.size() > 5) return kPort;
    unsigned value = 0;
    for (const char c : port) value = value * 10 + static_cast<unsigned>(c - '0');  // digits only
    if (value == 0 || value > 65535) return kPort;
  }
  return nullptr;
}

}  // namespace

namespace internal {

bool IsCanonicalFast(std::string_view raw) {
  size_t qmark = 0;
  return IsCanonical(raw, qmark);
}

const char* CanonicalizeTargetSlow(std::string_view method, std::string_view raw,
                                   const TargetOptions& options, std::string& buffer,
                                   CanonicalTarget& out) {
  out = CanonicalTarget{};
  if (method == "CONNECT") return kConnect;
  if (raw.empty()) return kEmpty;
  if (raw == "*") {
    if (method != "OPTIONS") return kAsterisk;
    out.target = out.path = raw;
    return nullptr;
  }
  std::string_view rest = raw;
  if (raw.front() != '/') {
    if (const char* error = SplitAbsoluteForm(raw, out.authority, rest)) return error;
  }
  // `rest` is empty or starts with '/', or (absolute-form only) '?' or '#'.
  const size_t qmark = rest.find('?');
  const std::string_view path = rest.substr(0, qmark);
  // Decoding never lengthens; one more byte for the '/' of "http://host".
  buffer.resize(rest.size() + 1);
  char* const begin = buffer.data();
  char* w = begin;
  if (path.empty() || path.front() != '/') *w++ = '/';
  if (const char* error = Decode<true>(path, options, w)) return error;
  if (HasLookalikeSeparator(std::string_view(begin, static_cast<size_t>(w - begin)))) {
    return kLookalike;
  }
  // Dot segments go after decoding, so that "%2e%2e" is one.
  if (const char* error = RemoveDotSegments(begin, w)) return error;
  const size_t path_size = static_cast<size_t>(w - begin);
  if (qmark != std::string_view::npos) {
    *w++ = '?';
    if (const char* error = Decode<false>(rest.substr(qmark + 1), options, w)) return error;
  }
  buffer.resize(static_cast<size_t>(w - begin));  // shrinks: the views below stay valid
  out.target = buffer;
  out.path = out.target.substr(0, path_size);
  out.has_query = qmark != std::string_view::npos;
  if (out.has_query) out.query = out.target.substr(path_size + 1);
  return nullptr;
}

}  // namespace internal

const char* CanonicalizeTarget(std::string_view method, std::string_view raw,
                               const TargetOptions& options, std::string& buffer,
                               CanonicalTarget& out) {
  size_t qmark = 0;
  if (IsCanonical(raw, qmark) && method != "CONNECT") [[likely]] {
    out.target = raw;
    out.has_query = qmark != std::string_view::npos;
    if (out.has_query) {
      out.path = std::string_view(raw.data(), qmark);
      out.query = std::string_view(raw.data() + qmark + 1, raw.size() - qmark - 1);
    } else {
      out.path = raw;
      out.query = {};
    }
    out.authority = {};
    return nullptr;
  }
  return internal::CanonicalizeTargetSlow(method, raw, options, buffer, out);
}

}  // namespace tollgate::util
