// The framing of a chunked request body (RFC 9112 7.1), checked byte by byte as it arrives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tollgate::http {

// The most a chunked body's framing may hold (issue 31: without them one connection grew the
// gateway's memory without bound through an endless extension or trailer section).
struct ChunkedLimits {
  // A chunk's size line: the size, its extensions and the CRLF. Longer is refused (kBad).
  size_t line_bytes = 4096;
  // The trailer section, from after the last chunk's line through the final CRLF, and its
  // fields: more is kTooLarge. Gateways pass server.max_header_bytes and max_header_fields.
  size_t trailer_bytes = 16 * 1024;
  size_t trailer_fields = 100;
};

// Not thread-safe; one per body. Reads a chunked body's framing, strictly: a size of 1 to 16 hex
// digits, optional extensions
// (`;name`, `;name=token`, `;name="quoted"`; blanks around `;` and `=`, but not right after the
// size nor before the CRLF), each line ending in CRLF, each chunk's data followed by CRLF, a
// trailer section of `name: value` lines, the final CRLF. A bare LF or CR, a blank or sign around a
// size, a control byte, a folded trailer line is refused at that byte: Beast's parser, which
// decodes the body, waits for a CRLF that never comes on some of these (issue 31: a bare LF after a
// size got no answer). A size line longer than ChunkedLimits::line_bytes is refused too, and a
// trailer section past its limits is kTooLarge, at the first byte over.
class ChunkedFraming {
 public:
  enum class Result {
    kMore,      // every byte so far can be part of a chunked body
    kDone,      // the body ended (its final CRLF), `*used` bytes into the data of this call
    kBad,       // a byte that cannot be, or a size line over its limit
    kTooLarge,  // the trailer section is over its limit of bytes or fields
  };

  explicit ChunkedFraming(ChunkedLimits limits = {}) : limits_(limits) {}

  // Scans the next bytes of the body. After kDone, kBad or kTooLarge, returns the same again.
  Result Scan(std::string_view data, size_t* used = nullptr);

 private:
  enum class State {
    kSize,           // hex digits (at least one)
    kExtStart,       // after ';'
    kExtName,        // an extension's name
    kExtAfterName,   // blanks after it
    kExtValueStart,  // after its '='
    kExtValue,       // a token value
    kQuoted,         // in a quoted value
    kQuotedEscape,   // after '\' in one
    kQuotedEnd,      // after its closing '"'
    kExtAfterValue,  // blanks after a value
    kLineLf,         // after the CR of a size line
    kData,           // `left_` bytes of data
    kDataCr,         // the CR after the data
    kDataLf,         // its LF
    kTrailerStart,   // the start of a trailer line, or the final CRLF
    kTrailerName,    // a trailer's name
    kTrailerValue,   // after its ':'
    kTrailerLf,      // after the CR of a trailer line
    kFinalLf,        // after the final CR
    kDone,
    kBad,
    kTooLarge,
  };
  State Next(unsigned char c);  // the state after byte `c` (not of data)
  State NextInExtension(unsigned char c);

  State state_ = State::kSize;
  uint64_t size_ = 0;  // the size being read
  int digits_ = 0;     // of it
  uint64_t left_ = 0;  // data bytes still to come
  ChunkedLimits limits_;
  size_t line_bytes_ = 0;     // of the size line being read
  size_t trailer_bytes_ = 0;  // of the trailer section so far
  size_t trailer_fields_ = 0;
};

}  // namespace tollgate::http
