// A fast 64-bit hash for in-memory tables, seeded per process (not cryptographic).
#pragma once

#include <cstdint>
#include <random>
#include <string_view>

#if defined(__linux__)
#include <sys/random.h>
#endif

// Header-only xxHash (Debian's libxxhash-dev): the short inputs hashed here (scopes, check
// names, API keys) then compile to a few inlined instructions, with no call into libxxhash.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>
static_assert(XXH_VERSION_NUMBER >= 800, "XXH3 is stable from xxHash 0.8.0");

namespace tollgate::util {

namespace internal {

inline uint64_t Mix(uint64_t a, uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

// 64 bits from the kernel's random source; std::random_device where getrandom() is missing or
// fails. Never 0.
inline uint64_t RandomSeed() {
  uint64_t seed = 0;
#if defined(__linux__)
  if (getrandom(&seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed)) seed = 0;
#endif
  if (seed == 0) {
    std::random_device device;
    seed = (uint64_t{device()} << 32) ^ device();
  }
  return seed == 0 ? 0x9e3779b97f4a7c15ull : seed;
}

}  // namespace internal

// Thread-safe. A random 64-bit value chosen at this function's first call and fixed for the
// life of the process; never 0. Every Hash64() mixes it in, so that identities a client chooses
// (addresses, /64s, API keys) cannot be crafted offline to collide in the memory store's table
// or the gateway's key cache.
inline uint64_t ProcessSeed() {
  static const uint64_t seed = internal::RandomSeed();
  return seed;
}

// Thread-safe. XXH3-64 of `s` under ProcessSeed() ^ `seed`: equal inputs and seeds hash equally
// within one process, differently from one process to the next. `seed` separates uses (two
// seeds give unrelated hashes of the same string). For in-process tables only: never persist a
// Hash64() or send it to another process (a value that must be stable needs a fixed-seed hash).
inline uint64_t Hash64(std::string_view s, uint64_t seed = 0) {
  return XXH3_64bits_withSeed(s.data(), s.size(), ProcessSeed() ^ seed);
}

// Thread-safe. XXH3-64 of `s` under `seed` alone, with no per-process part: the same on every
// process, machine and restart (XXH3's output is fixed from xxHash 0.8.0). For values that other
// processes must agree on (the enforced cohort of a plan), never for tables a client can fill.
inline uint64_t StableHash64(std::string_view s, uint64_t seed) {
  return XXH3_64bits_withSeed(s.data(), s.size(), seed);
}

// Two 64-bit hashes of one string, for a table that needs more than 64 bits to tell keys apart.
struct Hash128Value {
  uint64_t low;
  uint64_t high;
};

// Thread-safe. XXH3-128 of `s` under ProcessSeed() ^ `seed`, as Hash64() is XXH3-64: one call
// costs about what one Hash64() does. Same rules: in-process tables only.
inline Hash128Value Hash128(std::string_view s, uint64_t seed = 0) {
  const XXH128_hash_t h = XXH3_128bits_withSeed(s.data(), s.size(), ProcessSeed() ^ seed);
  return {h.low64, h.high64};
}

}  // namespace tollgate::util
