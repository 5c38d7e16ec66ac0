// The one JSON string escaper: every JSON text tollgate appends by hand (the access-log line,
// problem bodies, the usage export, the replay report) puts its strings through it; bodies
// built with Boost.JSON are escaped by Boost.JSON.
#pragma once

#include <string>
#include <string_view>

namespace tollgate::util {

// Appends `s` to `out` as the inside of a JSON string literal (without the quotes): `"` and `\`
// backslash-escaped, control bytes (below 0x20, and 0x7f) as \u00XX, well-formed UTF-8 passed
// through, and every byte that does not start a well-formed UTF-8 sequence (a stray
// continuation byte, an overlong form, a surrogate, a truncated sequence) as \ufffd, so the
// output is valid JSON whatever bytes a client sent.
void AppendJsonEscaped(std::string& out, std::string_view s);

// The same, as a new string.
std::string JsonEscape(std::string_view s);

}  // namespace tollgate::util
