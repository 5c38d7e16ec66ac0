#include "replay/log_line.hpp"

#include <bit>
#include <charconv>
#include <cstring>

namespace tollgate::replay {
namespace {

// Members replay reads, as bits of a mask: one seen twice is an error, a required one unseen
// names itself in the error.
enum Member : uint32_t {
  kTs = 1u << 0,
  kMethod = 1u << 1,
  kPath = 1u << 2,
  kQuery = 1u << 3,
  kStatus = 1u << 4,
  kClient = 1u << 5,
  kKeyId = 1u << 6,
  kRoute = 1u << 7,
  kDecision = 1u << 8,
  kLatency = 1u << 9,
  kDecided = 1u << 10,
  kOther = 0,
};

constexpr uint32_t kRequired =
    kTs | kMethod | kPath | kStatus | kClient | kKeyId | kRoute | kDecision;

struct Missing {
  Member member;
  const char* reason;
};
constexpr Missing kMissing[] = {
    {kTs, "missing member: ts"},         {kMethod, "missing member: method"},
    {kPath, "missing member: path"},     {kStatus, "missing member: status"},
    {kClient, "missing member: client"}, {kKeyId, "missing member: key_id"},
    {kRoute, "missing member: route"},   {kDecision, "missing member: decision"},
};

Member MemberOf(std::string_view name) {
  switch (name.size()) {
    case 2:
      return name == "ts" ? kTs : kOther;
    case 4:
      return name == "path" ? kPath : kOther;
    case 5:
      return name == "query" ? kQuery : name == "route" ? kRoute : kOther;
    case 6:
      return name == "method"   ? kMethod
             : name == "status" ? kStatus
             : name == "client" ? kClient
             : name == "key_id" ? kKeyId
                                : kOther;
    case 8:
      return name == "decision" ? kDecision : kOther;
    case 10:
      return name == "latency_ms" ? kLatency : name == "decided_us" ? kDecided : kOther;
    default:
      return kOther;
  }
}

// A reader over one line. Every Parse* advances `p` past what it read or returns a reason.
struct Reader {
  const char* p;
  const char* end;
  std::string& scratch;

  void SkipSpace() {
    // The gateway writes no whitespace: one test in the common case.
    while (p < end && static_cast<unsigned char>(*p) <= ' ' &&
           (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) {
      ++p;
    }
  }

  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Four hex digits after "\u".
  const char* ReadHex4(uint32_t& out) {
    if (end - p < 4) return "truncated";
    out = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = Hex(p[i]);
      if (h < 0) return "bad escape in a string";
      out = out << 4 | static_cast<uint32_t>(h);
    }
    p += 4;
    return nullptr;
  }

  void AppendUtf8(uint32_t cp) {
    if (cp < 0x80) {
      scratch.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      scratch.push_back(static_cast<char>(0xc0 | cp >> 6));
      scratch.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      scratch.push_back(static_cast<char>(0xe0 | cp >> 12));
      scratch.push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3f)));
      scratch.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      scratch.push_back(static_cast<char>(0xf0 | cp >> 18));
      scratch.push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3f)));
      scratch.push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3f)));
      scratch.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  // "\uXXXX" (after the backslash and 'u'), joining a surrogate pair.
  const char* ReadUnicodeEscape() {
    uint32_t cp = 0;
    if (const char* e = ReadHex4(cp)) return e;
    if (cp >= 0xdc00 && cp <= 0xdfff) return "lone surrogate in a string";
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (end - p < 2) return "truncated";
      if (p[0] != '\\' || p[1] != 'u') return "lone surrogate in a string";
      p += 2;
      uint32_t low = 0;
      if (const char* e = ReadHex4(low)) return e;
      if (low < 0xdc00 || low > 0xdfff) return "lone surrogate in a string";
      cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }
    AppendUtf8(cp);
    return nullptr;
  }

  // Moves `p` over string bytes that need no look (none of '"', '\\', or below 0x20), sixteen
  // at a time in GCC's generic vectors (SSE2 on x86-64, NEON on arm64), as util/target.cpp does:
  // a byte at a time was a third of the replay's time.
  void SkipPlainBytes() {
#if defined(__GNUC__)
    using Block = unsigned char __attribute__((vector_size(16)));
    while (end - p >= 16) {
      Block b;
      std::memcpy(&b, p, sizeof b);
      const auto flagged = (b == '"') | (b == '\\') | (b < 0x20);
      uint64_t half[2];
      std::memcpy(half, &flagged, sizeof half);
      if ((half[0] | half[1]) != 0) {
        if constexpr (std::endian::native == std::endian::little) {
          p += half[0] != 0 ? std::countr_zero(half[0]) / 8 : 8 + std::countr_zero(half[1]) / 8;
        }
        return;
      }
      p += 16;
    }
#endif
  }

  // A string, `p` after its opening quote. Without escapes (the usual case) a view into the
  // line; else decoded into `scratch`, whose capacity (the line's size, reserved by the caller)
  // never grows, so earlier views stay valid.
  const char* ReadString(std::string_view& out) {
    const char* start = p;
    SkipPlainBytes();
    for (; p < end; ++p) {
      const auto c = static_cast<unsigned char>(*p);
      if (c == '"') {
        out = std::string_view(start, static_cast<size_t>(p - start));
        ++p;
        return nullptr;
      }
      if (c == '\\') break;
      if (c < 0x20) return "control byte in a string";
    }
    if (p >= end) return "truncated";
    const size_t base = scratch.size();
    scratch.append(start, static_cast<size_t>(p - start));
    while (p < end) {
      const auto c = static_cast<unsigned char>(*p);
      if (c == '"') {
        out = std::string_view(scratch.data() + base, scratch.size() - base);
        ++p;
        return nullptr;
      }
      if (c < 0x20) return "control byte in a string";
      ++p;
      if (c != '\\') {
        scratch.push_back(static_cast<char>(c));
        continue;
      }
      if (p >= end) return "truncated";
      const char e = *p++;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          scratch.push_back(e);
          break;
        case 'b':
          scratch.push_back('\b');
          break;
        case 'f':
          scratch.push_back('\f');
          break;
        case 'n':
          scratch.push_back('\n');
          break;
        case 'r':
          scratch.push_back('\r');
          break;
        case 't':
          scratch.push_back('\t');
          break;
        case 'u':
          if (const char* err = ReadUnicodeEscape()) return err;
          break;
        default:
          return "bad escape in a string";
      }
    }
    return "truncated";
  }

  // A JSON number (RFC 8259 grammar) as its text.
  const char* ReadNumber(std::string_view& text) {
    const char* start = p;
    auto digits = [this] {
      const char* s = p;
      while (p < end && *p >= '0' && *p <= '9') ++p;
      return p - s;
    };
    if (p < end && *p == '-') ++p;
    if (p < end && *p == '0') {
      ++p;
    } else if (digits() == 0) {
      return p >= end ? "truncated" : "bad number";
    }
    if (p < end && *p == '.') {
      ++p;
      if (digits() == 0) return p >= end ? "truncated" : "bad number";
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
      ++p;
      if (p < end && (*p == '+' || *p == '-')) ++p;
      if (digits() == 0) return p >= end ? "truncated" : "bad number";
    }
    text = std::string_view(start, static_cast<size_t>(p - start));
    return nullptr;
  }

  // A value of a member replay does not read: a string, number, true, false or null.
  const char* SkipValue() {
    if (p >= end) return "truncated";
    std::string_view ignored;
    switch (*p) {
      case '"':
        ++p;
        return ReadString(ignored);
      case '{':
      case '[':
        return "nested object or array";
      case 't':
      case 'f':
      case 'n': {
        for (std::string_view word : {"true", "false", "null"}) {
          const size_t left = static_cast<size_t>(end - p);
          if (word[0] != *p) continue;
          if (left < word.size()) {
            return std::memcmp(p, word.data(), left) == 0 ? "truncated" : "bad literal";
          }
          if (std::memcmp(p, word.data(), word.size()) != 0) return "bad literal";
          p += word.size();
          return nullptr;
        }
        return "bad literal";
      }
      default:
        return ReadNumber(ignored);
    }
  }
};

bool ToInteger(std::string_view text, int64_t& out) {
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// Milliseconds as written by the gateway ("12.345") to whole microseconds; exponents too.
bool MillisToMicros(std::string_view text, int64_t& micros) {
  const size_t dot = text.find('.');
  const bool plain = text.find_first_of("eE") == std::string_view::npos &&
                     (dot == std::string_view::npos || text.size() - dot <= 4);
  if (plain) {
    int64_t whole = 0;
    // At most 1e12 ms (as below): whole * 1000 stays far from overflowing.
    if (!ToInteger(text.substr(0, dot), whole) || whole < 0 || whole > 1'000'000'000'000) {
      return false;
    }
    int64_t frac = 0;
    size_t digits = 0;
    if (dot != std::string_view::npos) {
      for (char c : text.substr(dot + 1)) {
        if (c < '0' || c > '9') return false;
        frac = frac * 10 + (c - '0');
        ++digits;
      }
    }
    for (; digits < 3; ++digits) frac *= 10;
    micros = whole * 1000 + frac;
    return true;
  }
  double ms = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec != std::errc() || ptr != text.data() + text.size() || !(ms >= 0) || ms > 1e12) {
    return false;
  }
  micros = static_cast<int64_t>(ms * 1000.0);
  return true;
}

const char* ReadMemberValue(Reader& r, Member m, LogLine& out) {
  if (m == kOther) return r.SkipValue();
  if (r.p >= r.end) return "truncated";
  if (m == kStatus || m == kLatency || m == kDecided) {
    const char* const bad = m == kStatus    ? "status: not an integer"
                            : m == kDecided ? "decided_us: not an integer"
                                            : "latency_ms: not a number";
    if (*r.p != '-' && (*r.p < '0' || *r.p > '9')) return bad;
    std::string_view text;
    if (const char* e = r.ReadNumber(text)) return e;
    if (m == kStatus) return ToInteger(text, out.status) ? nullptr : bad;
    if (m == kDecided) return ToInteger(text, out.decided_us) && out.decided_us > 0 ? nullptr : bad;
    return MillisToMicros(text, out.latency_us) ? nullptr : "latency_ms: not a number";
  }
  if (*r.p != '"') {
    switch (m) {
      case kTs:
        return "ts: not a string";
      case kMethod:
        return "method: not a string";
      case kPath:
        return "path: not a string";
      case kQuery:
        return "query: not a string";
      case kClient:
        return "client: not a string";
      case kKeyId:
        return "key_id: not a string";
      case kRoute:
        return "route: not a string";
      default:
        return "decision: not a string";
    }
  }
  ++r.p;
  std::string_view* target = m == kTs       ? &out.ts
                             : m == kMethod ? &out.method
                             : m == kPath   ? &out.path
                             : m == kQuery  ? &out.query
                             : m == kClient ? &out.client
                             : m == kKeyId  ? &out.key_id
                             : m == kRoute  ? &out.route
                                            : &out.decision;
  return r.ReadString(*target);
}

int Digits(std::string_view s, size_t at, size_t n) {
  int v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

}  // namespace

bool MoveViews(const LogLine& l, std::string_view from, const char* to, LogLine& out) {
  LogLine moved = l;
  for (std::string_view* v : {&moved.ts, &moved.method, &moved.path, &moved.query, &moved.client,
                              &moved.key_id, &moved.route, &moved.decision}) {
    if (v->empty()) continue;
    if (v->data() < from.data() || v->data() + v->size() > from.data() + from.size()) return false;
    *v = std::string_view(to + (v->data() - from.data()), v->size());
  }
  out = moved;
  return true;
}

bool ParseIsoUtc(std::string_view s, int64_t& micros) {
  if (s.size() < 20 || s.back() != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
      s[13] != ':' || s[16] != ':') {
    return false;
  }
  const int year = Digits(s, 0, 4), month = Digits(s, 5, 2), day = Digits(s, 8, 2);
  const int hour = Digits(s, 11, 2), minute = Digits(s, 14, 2), second = Digits(s, 17, 2);
  if (year < 0 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 || minute < 0 ||
      minute > 59 || second < 0 || second > 59) {
    return false;
  }
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (day > kDays[month - 1] + (month == 2 && leap ? 1 : 0)) return false;
  int64_t frac = 0;
  const size_t frac_len = s.size() - 20;  // "." and the digits
  if (frac_len == 1 || frac_len > 7) return false;
  if (frac_len > 0) {
    if (s[19] != '.') return false;
    const int f = Digits(s, 20, frac_len - 1);
    if (f < 0) return false;
    frac = f;
    for (size_t i = frac_len - 1; i < 6; ++i) frac *= 10;
  } else if (s[19] != 'Z') {
    return false;
  }
  const int64_t days = DaysFromCivil(year, month, day);
  micros = ((days * 24 + hour) * 60 + minute) * 60'000'000 + int64_t{second} * 1'000'000 + frac;
  return true;
}

const char* ParseLogLine(std::string_view line, LogLine& out, std::string& scratch) {
  out = LogLine{};
  if (line.size() > kMaxLineBytes) return "line too long";
  scratch.clear();
  if (scratch.capacity() < line.size()) scratch.reserve(line.size());
  Reader r{line.data(), line.data() + line.size(), scratch};
  r.SkipSpace();
  if (r.p >= r.end) return "empty line";
  if (*r.p != '{') return "not a JSON object";
  ++r.p;
  r.SkipSpace();
  uint32_t seen = 0;
  if (r.p < r.end && *r.p == '}') {
    ++r.p;
  } else {
    for (;;) {
      if (r.p >= r.end) return "truncated";
      if (*r.p != '"') return "expected a member name";
      ++r.p;
      std::string_view name;
      if (const char* e = r.ReadString(name)) return e;
      r.SkipSpace();
      if (r.p >= r.end) return "truncated";
      if (*r.p != ':') return "expected ':'";
      ++r.p;
      r.SkipSpace();
      const Member m = MemberOf(name);
      if (m != kOther && (seen & m) != 0) return "member given twice";
      seen |= m;
      if (const char* e = ReadMemberValue(r, m, out)) return e;
      r.SkipSpace();
      if (r.p >= r.end) return "truncated";
      if (*r.p == '}') {
        ++r.p;
        break;
      }
      if (*r.p != ',') return "expected ',' or '}'";
      ++r.p;
      r.SkipSpace();
    }
  }
  r.SkipSpace();
  if (r.p != r.end) return "text after the object";
  if ((seen & kRequired) != kRequired) {
    for (const Missing& m : kMissing) {
      if ((seen & m.member) == 0) return m.reason;
    }
  }
  if (!ParseIsoUtc(out.ts, out.ts_micros)) return "ts: not an ISO 8601 UTC time";
  return nullptr;
}

}  // namespace tollgate::replay
