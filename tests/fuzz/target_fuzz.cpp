// libFuzzer target: CanonicalizeTarget on arbitrary bytes (the input is the request target), for
// each combination of TargetOptions. Checks the contract's properties (the answer is canonical
// and its own canonical form, the fast path agrees with the rewrite, options only ever accept
// more) and, differentially, that Boost.URL's own RFC 3986 normalisation agrees wherever the
// two should (see Oracle). See tests/fuzz/run.sh and tests/fuzz/smoke.sh.
#include <algorithm>
#include <array>
#include <boost/url/parse.hpp>
#include <boost/url/src.hpp>  // Boost.URL compiled here, with the sanitizers and coverage
#include <boost/url/url.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <tollgate/util/path_fold.hpp>
#include <tollgate/util/target.hpp>

namespace {

namespace urls = boost::urls;
using tollgate::util::CanonicalizeTarget;
using tollgate::util::CanonicalTarget;
using tollgate::util::TargetOptions;
namespace internal = tollgate::util::internal;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}
int HexValue(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }
bool IsUnreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}
bool IsSubDelim(unsigned char c) { return std::strchr("!$&'()*+,;=", c) != nullptr && c != 0; }
bool IsPchar(unsigned char c) { return IsUnreserved(c) || IsSubDelim(c) || c == ':' || c == '@'; }

// What the contract promises of every answer's path or query.
void CheckCanonicalPart(std::string_view s, bool is_path, const TargetOptions& options) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    Check(c > 0x20 && c < 0x7f && c != '#' && c != '\\');
    if (is_path && !options.allow_path_parameters) Check(c != ';');
    if (c != '%') continue;
    Check(i + 2 < s.size() && IsHex(s[i + 1]) && IsHex(s[i + 2]));
    Check(!(s[i + 1] >= 'a' && s[i + 1] <= 'f') && !(s[i + 2] >= 'a' && s[i + 2] <= 'f'));
    const auto v = static_cast<unsigned char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
    Check(!IsUnreserved(v) && (!is_path || (v >= 0x20 && v != 0x7f)));
    if (is_path && !options.allow_encoded_slash) Check(v != '/' && v != '\\');
  }
  if (!is_path) return;
  // No "." or ".." piece in a segment split where some upstream splits it (";", "%3B", and
  // "%2F" and "%5C" when kept).
  size_t piece = 1;
  for (size_t i = 1; i <= s.size(); ++i) {
    size_t separator = 0;
    if (i == s.size() || s[i] == '/' || s[i] == ';') {
      separator = 1;
    } else if (s[i] == '%') {
      const std::string_view escape = s.substr(i, 3);
      if (escape == "%3B" || escape == "%2F" || escape == "%5C") separator = 3;
    }
    if (separator == 0) continue;
    const std::string_view p = s.substr(piece, i - piece);
    Check(p != "." && p != "..");
    piece = i + separator;
    i = piece - 1;
  }
  Check(s.find("//") == std::string_view::npos);
  Check(s.find("/./") == std::string_view::npos && s.find("/../") == std::string_view::npos);
  Check(!s.ends_with("/.") && !s.ends_with("/.."));
}

// Decodes the %XX whose byte is in `set`: Boost.URL 1.81 decodes every character a part may hold
// unencoded (the path's pchar and '/', the query's pchar, '/' and '?'), not only the unreserved
// ones RFC 3986 §6.2.2.2 allows. Applied to our answer, it makes it comparable with Boost's.
template <class Set>
std::string DecodeWhere(std::string_view s, Set set) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const auto v = static_cast<unsigned char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      if (set(v)) {
        out += static_cast<char>(v);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// Whether every byte of an origin-form target is one RFC 3986 lets it hold (we also accept
// "[]{}|^`<>\"", which clients send and Boost.URL refuses).
bool IsStrictOriginForm(std::string_view s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (!IsPchar(c) && c != '/' && c != '?' && c != '%') return false;
  }
  return true;
}

struct Normalized {
  std::string path, query;
  bool has_query = false;
};

// Boost.URL's normalisation of an origin-form target, adjusted where it legitimately differs
// from ours:
// - slashes: we merge runs of '/' first (as nginx); Boost.URL never does. They are merged here
//   before Boost.URL sees the path (no decoding makes a '/', so before or after is the same).
// - leading "..": Boost.URL 1.81 keeps a ".." that climbs above the root ("/a/../../x" is
//   "/../x", errata 4547 applied to absolute paths); RFC 3986 §5.2.4 and we drop it.
// - what is decoded: see DecodeWhere.
bool Oracle(std::string_view origin_form, Normalized& out) {
  const size_t qmark = origin_form.find('?');
  std::string merged;
  for (const char c : origin_form.substr(0, qmark)) {
    if (c == '/' && !merged.empty() && merged.back() == '/') continue;
    merged += c;
  }
  if (qmark != std::string_view::npos) merged += origin_form.substr(qmark);
  const auto parsed = urls::parse_origin_form(merged);
  if (!parsed) return false;
  urls::url u(*parsed);
  u.normalize_path();
  u.normalize_query();
  std::string_view path = u.encoded_path();
  while (path.starts_with("/..") && (path.size() == 3 || path[3] == '/')) path.remove_prefix(3);
  out.path = path.empty() ? "/" : std::string(path);
  out.has_query = u.has_query();
  out.query = u.encoded_query();
  return true;
}

// The errors for what we refuse beyond RFC 3986's grammar.
bool IsPolicyRefusal(const char* error) {
  for (const char* e :
       {"encoded control byte", "encoded '/' or '\\' in the path", "';' in the path",
        "dot segment behind ';', %3B, %2F or %5C", "userinfo in the authority",
        "scheme is not http or https", "empty host", "percent-encoding in the host", "invalid port",
        "invalid authority", "encoded look-alike of '.', '/' or '\\' in the path"}) {
    if (std::strcmp(error, e) == 0) return true;
  }
  return false;
}

void Differential(std::string_view raw, const char* error, const CanonicalTarget& out) {
  if (raw.empty() || raw == "*") return;
  std::string origin_form;  // what Boost.URL reads as the path and query
  std::string authority;
  if (raw.front() == '/') {
    if (!IsStrictOriginForm(raw)) return;
    origin_form = raw;
  } else {
    // Absolute-form is "scheme://"; Boost.URL 1.81 also asserts (path.hpp:82, nseg == 0) on a
    // "scheme:" followed by a bad rootless path, which we refuse before any parsing.
    const size_t colon = raw.find(':');
    const bool scheme_ok = colon != std::string_view::npos && colon > 0 &&
                           raw.substr(colon + 1, 2) == "//" &&
                           raw.substr(0, colon).find_first_not_of(
                               "abcdefghijklmnopqrstuvwxyz"
                               "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.") == std::string_view::npos;
    if (!scheme_ok) {
      Check(error != nullptr);
      return;
    }
    const auto parsed = urls::parse_absolute_uri(raw);
    if (!parsed) {
      // Absolute-form Boost.URL refuses but we accept: only where our grammar is wider than
      // RFC 3986's, after the authority (which Boost.URL parses for us).
      if (!error) {
        const size_t stop = raw.find_first_of("/?#", raw.find("://") + 3);
        Check(stop != std::string_view::npos && !IsStrictOriginForm(raw.substr(stop)));
      }
      return;
    }
    // An http(s) URI has an authority (RFC 9110 §4.2.1); Boost.URL reads any absolute URI.
    const auto scheme = parsed->scheme_id();
    if (!parsed->has_authority() ||
        (scheme != urls::scheme::http && scheme != urls::scheme::https)) {
      Check(error != nullptr);
      return;
    }
    const std::string_view path = parsed->encoded_path();
    origin_form = path.empty() ? "/" : std::string(path);
    if (parsed->has_query()) origin_form += "?" + std::string(parsed->encoded_query());
    if (!IsStrictOriginForm(origin_form)) return;
    authority = parsed->encoded_authority();
  }
  Normalized boost;
  const bool boost_ok = Oracle(origin_form, boost);
  if (error) {
    // Boost.URL accepts it: then we refused it for a reason of our own, not of grammar.
    if (boost_ok) Check(IsPolicyRefusal(error));
    return;
  }
  Check(boost_ok);
  Check(out.authority == authority);
  Check(DecodeWhere(out.path, [](unsigned char c) { return IsPchar(c) || c == '/'; }) ==
        boost.path);
  Check(out.has_query == boost.has_query);
  Check(DecodeWhere(out.query, [](unsigned char c) {
          return IsPchar(c) || c == '/' || c == '?';
        }) == boost.query);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data),
                        size);  // its own allocation: ASan sees overreads
  static std::string buffer;    // reused, as a connection reuses its own
  static constexpr std::array<TargetOptions, 4> kOptions{
      TargetOptions{}, TargetOptions{.allow_encoded_slash = true},
      TargetOptions{.allow_path_parameters = true},
      TargetOptions{.allow_encoded_slash = true, .allow_path_parameters = true}};

  std::string first_answer;
  bool first_ok = false;
  for (const TargetOptions& options : kOptions) {
    CanonicalTarget out;
    const char* error = CanonicalizeTarget("GET", raw, options, buffer, out);
    const bool is_default = &options == &kOptions[0];

    // The fast path is exactly the rewrite that changes nothing.
    std::string slow_buffer;
    CanonicalTarget slow;
    const char* slow_error =
        internal::CanonicalizeTargetSlow("GET", raw, options, slow_buffer, slow);
    Check((error == nullptr) == (slow_error == nullptr));
    if (internal::IsCanonicalFast(raw)) {
      Check(!error && out.target.data() == raw.data() && slow.target == raw);
    }

    if (is_default) {
      first_ok = !error;
      if (!error) first_answer = out.target;
    } else if (first_ok) {
      // Options only ever accept more, and never change an answer.
      Check(!error && out.target == first_answer);
    }
    if (error) {
      Check(std::strlen(error) > 0);
      if (is_default) Differential(raw, error, out);
      continue;
    }
    Check(slow.target == out.target && slow.path == out.path && slow.query == out.query &&
          slow.has_query == out.has_query && slow.authority == out.authority);
    Check(out.path.size() + (out.has_query ? 1 + out.query.size() : 0) == out.target.size());
    Check(out.target.starts_with(out.path));
    Check(!out.has_query || out.target[out.path.size()] == '?');
    Check(out.target.ends_with(out.query));
    Check(out.path.starts_with('/'));
    Check(out.authority.empty() || raw.front() != '/');
    CheckCanonicalPart(out.path, true, options);
    CheckCanonicalPart(out.query, false, options);

    // Idempotent, and through the fast path when it holds nothing the fast path leaves out.
    const std::string canonical(out.target);
    std::string again_buffer;
    CanonicalTarget again;
    Check(CanonicalizeTarget("GET", canonical, options, again_buffer, again) == nullptr);
    Check(again.target == canonical && again.authority.empty());
    if (canonical.find_first_of("%;") == std::string::npos)
      Check(internal::IsCanonicalFast(canonical));

    if (is_default) Differential(raw, nullptr, out);

    // The folded form routes are matched against (util/path_fold.hpp): a path, lower-case,
    // without empty or dot segments, its own fold, and PathNeedsFold never misses a change.
    std::string folded, folded_again;
    tollgate::util::FoldPath(out.path, folded);
    Check(folded.starts_with('/') && folded.find("//") == std::string::npos);
    Check(std::none_of(folded.begin(), folded.end(), [](char c) { return c >= 'A' && c <= 'Z'; }) ||
          folded.find('%') != std::string::npos);
    Check(folded.find("/./") == std::string::npos && folded.find("/../") == std::string::npos);
    tollgate::util::FoldPath(folded, folded_again);
    Check(folded_again == folded);
    if (!tollgate::util::PathNeedsFold(out.path)) Check(folded == out.path);
  }

  // The methods with a form of their own.
  CanonicalTarget out;
  Check(CanonicalizeTarget("CONNECT", raw, kOptions[0], buffer, out) != nullptr);
  const char* options_error = CanonicalizeTarget("OPTIONS", raw, kOptions[0], buffer, out);
  Check((options_error == nullptr) == (first_ok || raw == "*"));
  if (raw == "*") Check(out.target == "*" && out.path == "*" && !out.has_query);
  return 0;
}
