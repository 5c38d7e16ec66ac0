// One line of the gateway's JSON access log (src/http/access_line.cpp, RenderAccessLine), parsed by
// hand for `tollgate replay`: a flat JSON object with known members, read at over a million
// lines a second. A pure function: no I/O, no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tollgate::replay {

// The members replay reads. Strings are views into the line or into the caller's scratch buffer
// (when they held escapes), valid until the next parse with that buffer.
struct LogLine {
  std::string_view ts;        // required: "2026-11-29T21:59:56.123Z"
  int64_t ts_micros = 0;      // `ts` as Unix microseconds
  std::string_view method;    // required
  std::string_view path;      // required: canonical, without the query
  std::string_view query;     // optional (logs before it was written: empty)
  int64_t status = 0;         // required
  std::string_view client;    // required
  std::string_view key_id;    // required ("" for anonymous and invalid keys)
  std::string_view route;     // required ("" when the gateway answered before routing)
  std::string_view decision;  // required
  int64_t latency_us = 0;     // `latency_ms` in microseconds; optional (0)
  // `decided_us`: when the gateway decided the request, Unix microseconds; optional (0: a log
  // written before it, or a line answered before routing). Lines are written when requests
  // finish; replay decides them in this order (issue 31).
  int64_t decided_us = 0;
  // The decision's time: `decided_us`, else `ts` less the latency (`ts` has milliseconds only).
  int64_t DecidedMicros() const { return decided_us > 0 ? decided_us : ts_micros - latency_us; }
};

// `l` with every string moved from the line `from` to the same bytes at `to` (a copy of `from`).
// False, and `out` unchanged, when a string is not in `from` (an escape decoded into scratch).
// Every string member of LogLine is moved: one added to it goes here too.
bool MoveViews(const LogLine& l, std::string_view from, const char* to, LogLine& out);

// The longest line read (bytes, without the newline); longer ones are malformed.
inline constexpr size_t kMaxLineBytes = 64 * 1024;

// Parses `line` (without its newline). Returns nullptr on success, else a short static reason
// ("truncated", "bad escape in a string", "missing member: route", "status: not an integer").
// Rules: exactly one JSON object, optionally surrounded by whitespace; members of other names
// are skipped when their value is a string, number, true, false or null, and refused when it is
// an object or an array (the gateway never writes those); a member given twice is refused;
// escapes are decoded (\uXXXX to UTF-8, surrogate pairs joined, a lone surrogate refused);
// control bytes (below 0x20, NUL included) inside strings are refused, as JSON requires; other
// bytes, including invalid UTF-8, pass through as bytes (the gateway writes valid UTF-8 only).
// `scratch` holds decoded strings: keep one per reader so that its capacity is reused.
const char* ParseLogLine(std::string_view line, LogLine& out, std::string& scratch);

// "YYYY-MM-DDTHH:MM:SS[.f{1,6}]Z" (UTC) as Unix microseconds; false when it is not one.
bool ParseIsoUtc(std::string_view text, int64_t& micros);

}  // namespace tollgate::replay
