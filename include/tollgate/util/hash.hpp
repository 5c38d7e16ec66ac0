// A fast, seeded 64-bit hash for in-memory tables (not cryptographic).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace tollgate::util {

namespace internal {
inline uint64_t Mix(uint64_t a, uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}
inline uint64_t Read64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
}  // namespace internal

// Thread-safe (pure). Multiply-mix over 8-byte words, in the spirit of wyhash.
inline uint64_t Hash64(std::string_view s, uint64_t seed = 0) {
  constexpr uint64_t k0 = 0xa0761d6478bd642full;
  constexpr uint64_t k1 = 0xe7037ed1a0b428dbull;
  constexpr uint64_t k2 = 0x8ebc6af09c88c6e3ull;
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = seed ^ internal::Mix(seed ^ k0, n ^ k1);
  while (n >= 16) {
    h = internal::Mix(internal::Read64(p) ^ k1, internal::Read64(p + 8) ^ h);
    p += 16;
    n -= 16;
  }
  uint64_t a = 0;
  uint64_t b = 0;
  if (n >= 8) {
    a = internal::Read64(p);
    b = internal::Read64(p + n - 8);
  } else if (n > 0) {
    char buf[8] = {};
    std::memcpy(buf, p, n);
    a = internal::Read64(buf);
    b = n;
  }
  return internal::Mix(internal::Mix(a ^ k1, b ^ h) ^ k2, n ^ k0);
}

}  // namespace tollgate::util
