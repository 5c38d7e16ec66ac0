#include <tollgate/http/chunked_framing.hpp>

#include <algorithm>

namespace tollgate::http {
namespace {

// RFC 9110 tchar.
constexpr bool IsTokenChar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

constexpr int HexValue(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A field value's bytes: visible ASCII, obs-text, space and tab.
constexpr bool IsValueChar(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

constexpr int kMaxSizeDigits = 16;  // 64 bits

}  // namespace

// chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ), then CRLF.
ChunkedFraming::State ChunkedFraming::NextInExtension(unsigned char c) {
  const bool blank = c == ' ' || c == '\t';
  const bool token = IsTokenChar(c);
  switch (state_) {
    case State::kExtStart:  // after ';'
      return blank ? State::kExtStart : token ? State::kExtName : State::kBad;
    case State::kExtName:
    case State::kExtAfterName:
      if (token && state_ == State::kExtName) return State::kExtName;
      if (blank) return State::kExtAfterName;
      if (c == '=') return State::kExtValueStart;
      break;
    case State::kExtValueStart:
      if (blank) return State::kExtValueStart;
      if (c == '"') return State::kQuoted;
      return token ? State::kExtValue : State::kBad;
    case State::kExtValue:
      if (token) return State::kExtValue;
      if (blank) return State::kExtAfterValue;
      break;
    case State::kQuoted:
      if (c == '"') return State::kQuotedEnd;
      if (c == '\\') return State::kQuotedEscape;
      return IsValueChar(c) ? State::kQuoted : State::kBad;
    case State::kQuotedEscape:
      return IsValueChar(c) ? State::kQuoted : State::kBad;
    case State::kQuotedEnd:
    case State::kExtAfterValue:
      if (blank) return State::kExtAfterValue;
      break;
    default:
      return State::kBad;
  }
  // After a name or a value: the next extension, or the line's end (not after blanks: Beast's
  // parser refuses them there).
  if (c == ';') return State::kExtStart;
  const bool after_blank = state_ == State::kExtAfterName || state_ == State::kExtAfterValue;
  return c == '\r' && !after_blank ? State::kLineLf : State::kBad;
}

ChunkedFraming::State ChunkedFraming::Next(unsigned char c) {
  State next = State::kBad;
  switch (state_) {
    case State::kSize:
      if (const int v = HexValue(c); v >= 0 && digits_ < kMaxSizeDigits) {
        size_ = size_ * 16 + static_cast<uint64_t>(v);
        ++digits_;
        next = State::kSize;
      } else if (digits_ > 0 && c == ';') {
        next = State::kExtStart;
      } else if (digits_ > 0 && c == '\r') {
        next = State::kLineLf;
      }
      break;
    case State::kExtStart:
    case State::kExtName:
    case State::kExtAfterName:
    case State::kExtValueStart:
    case State::kExtValue:
    case State::kQuoted:
    case State::kQuotedEscape:
    case State::kQuotedEnd:
    case State::kExtAfterValue:
      return NextInExtension(c);
    case State::kLineLf:
      if (c == '\n') {
        left_ = size_;
        next = size_ == 0 ? State::kTrailerStart : State::kData;
        size_ = 0;
        digits_ = 0;
      }
      break;
    case State::kDataCr:
      return c == '\r' ? State::kDataLf : State::kBad;
    case State::kDataLf:
      return c == '\n' ? State::kSize : State::kBad;
    case State::kTrailerStart:
      if (c == '\r') {
        next = State::kFinalLf;
      } else if (IsTokenChar(c)) {
        next = State::kTrailerName;
      }
      break;
    case State::kTrailerName:
      if (IsTokenChar(c)) {
        next = State::kTrailerName;
      } else if (c == ':') {
        next = State::kTrailerValue;
      }
      break;
    case State::kTrailerValue:
      if (c == '\r') {
        next = State::kTrailerLf;
      } else if (IsValueChar(c)) {
        next = State::kTrailerValue;
      }
      break;
    case State::kTrailerLf:
      return c == '\n' ? State::kTrailerStart : State::kBad;
    case State::kFinalLf:
      return c == '\n' ? State::kDone : State::kBad;
    case State::kData:  // Scan() skips data
    case State::kDone:
    case State::kBad:
    case State::kTooLarge:
      break;
  }
  return next;
}

ChunkedFraming::Result ChunkedFraming::Scan(std::string_view data, size_t* used) {
  size_t i = 0;
  while (i < data.size() && state_ != State::kDone && state_ != State::kBad &&
         state_ != State::kTooLarge) {
    if (state_ == State::kData) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, data.size() - i));
      left_ -= n;
      i += n;
      if (left_ == 0) state_ = State::kDataCr;
      continue;
    }
    const State before = state_;
    const bool trailer = before >= State::kTrailerStart && before <= State::kFinalLf;
    if (trailer ? ++trailer_bytes_ > limits_.trailer_bytes : ++line_bytes_ > limits_.line_bytes) {
      state_ = trailer ? State::kTooLarge : State::kBad;
      break;
    }
    state_ = Next(static_cast<unsigned char>(data[i++]));
    if (state_ == State::kData || state_ == State::kTrailerStart || before == State::kDataLf) {
      line_bytes_ = 0;  // a size line, or the CRLF after a chunk's data, ended
    } else if (before == State::kTrailerStart && state_ == State::kTrailerName &&
               ++trailer_fields_ > limits_.trailer_fields) {
      state_ = State::kTooLarge;
    }
  }
  if (used) *used = i;
  switch (state_) {
    case State::kDone:
      return Result::kDone;
    case State::kBad:
      return Result::kBad;
    case State::kTooLarge:
      return Result::kTooLarge;
    default:
      return Result::kMore;
  }
}

}  // namespace tollgate::http
