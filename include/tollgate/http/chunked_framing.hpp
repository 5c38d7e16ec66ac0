// The framing of a chunked request body (RFC 9112 7.1), checked byte by byte as it arrives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tollgate::http {

// Not thread-safe; one per body. Reads a chunked body's framing, strictly: a size of 1 to 16 hex
// digits, optional extensions
// (`;name`, `;name=token`, `;name="quoted"`; blanks around `;` and `=`, but not right after the
// size nor before the CRLF), each line ending in CRLF, each chunk's data followed by CRLF, a
// trailer section of `name: value` lines, the final CRLF. A bare LF or CR, a blank or sign around a
// size, a control byte, a folded trailer line is refused at that byte: Beast's parser, which
// decodes the body, waits for a CRLF that never comes on some of these (issue 31: a bare LF after a
// size got no answer).
class ChunkedFraming {
 public:
  enum class Result {
    kMore,  // every byte so far can be part of a chunked body
    kDone,  // the body ended (its final CRLF), `*used` bytes into the data of this call
    kBad,   // a byte that cannot be
  };

  // Scans the next bytes of the body. After kDone or kBad, returns the same again.
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
  };
  State Next(unsigned char c);  // the state after byte `c` (not of data)
  State NextInExtension(unsigned char c);

  State state_ = State::kSize;
  uint64_t size_ = 0;  // the size being read
  int digits_ = 0;     // of it
  uint64_t left_ = 0;  // data bytes still to come
};

}  // namespace tollgate::http
