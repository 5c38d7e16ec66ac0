// SHA-256 of API keys: keys are stored and compared as digests, never in clear (DESIGN.md,
// "Identity"). OpenSSL's implementation, behind two plain functions.
#pragma once

#include <string>
#include <string_view>

namespace tollgate::util {

// Lowercase hex SHA-256 of `text`: 64 characters.
std::string Sha256Hex(std::string_view text);

// The 32 bytes of SHA-256 of `text`.
std::string Sha256Raw(std::string_view text);

}  // namespace tollgate::util
