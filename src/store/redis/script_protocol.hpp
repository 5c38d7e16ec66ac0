// The Lua script's protocol, client side: the arguments of a decision's call, many token-bucket
// decisions in one call, and what the replies mean. The script's header
// (src/store/redis_script.lua) is the reference for every argument and reply.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tollgate/core/decision.hpp>
#include <tollgate/core/limit.hpp>
#include <tollgate/store/store.hpp>
#include <vector>

namespace tollgate::store::redis {

// Values per check in a reply of the general path: allowed, code, limit, remaining, reset_us,
// retry_after_us, used, over_allowance.
inline constexpr size_t kValuesPerCheck = 9;

// The last part of a check's key: <prefix>:{<scope>}:<check>:<suffix> ("tb", "log", "swc",
// "fw", "q").
const char* AlgorithmSuffix(core::Algorithm a);

// p1, p2, p3, p4 of one check on the general path. `may_delay` false: a smoothing bucket's debt
// is not offered (p4 = 0).
std::array<int64_t, 4> ScriptParams(const core::Limit& limit, bool may_delay = true);

// One check on the token-bucket path: need, refill units per us, key TTL (ms), room (its debt
// included when `may_delay`), enforced. REQUIRES: `limit` is a token bucket.
std::array<int64_t, 5> TokenBucketParams(const core::Limit& limit, int64_t cost, bool enforced,
                                         bool may_delay = true);

// Not thread-safe (a value type). One decision's script call, RESP-encoded, and where its pieces
// lie in it: a group's call (GroupEncoder) copies them, and NOSCRIPT resends it as EVAL.
struct ScriptRequest {
  std::string command;    // EVALSHA <sha> <numkeys> <keys...> <args...>, RESP-encoded
  size_t header_len = 0;  // "*<n>\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n": replaced for EVAL
  size_t args = 0;        // element count of the request
  // Its keys [keys_begin, keys_end) and, on the token-bucket path, its per-check arguments
  // [params_begin, end).
  size_t keys_begin = 0;
  size_t keys_end = 0;
  size_t params_begin = 0;
  int64_t now_us = 0;  // the `now` argument; 0 = Redis TIME. A group shares one.
  size_t n = 0;        // checks
  bool fast = false;   // every check a token bucket: the token-bucket path, groupable
  bool consume = false;
  // A group (GroupEncoder): the next request of the group; and, set by the encoder, the index
  // of this request's arguments among the group's shapes, and whether its keys are the
  // previous request's (sent once).
  ScriptRequest* next = nullptr;
  size_t shape = 0;
  bool same_keys = false;
};

// Encodes `batch` into `request` (reusing its buffer) as a call of the script whose SHA1 is
// `sha`, on keys <prefix>:{<scope>}:<check>:<suffix>. Returns its first key ("" when it has no
// check), whose cluster slot is the request's: a batch's keys share their hash tag.
std::string_view EncodeRequest(ScriptRequest& request, std::string_view sha,
                               std::string_view prefix, const Batch& batch);

// The same call as EVAL of the script itself, for after NOSCRIPT (which caches it again).
std::string EncodeEval(const ScriptRequest& request, std::string_view script);

// Not thread-safe: holds scratch space, reused from call to call. Encodes one script call
// deciding every request of a group in turn, each as if it came alone at the group's `now` (the
// script's 'M' path, or 'U' when no key is named twice): each request's keys; each distinct shape
// (a request's check count and per-check arguments) once; then per request its shape and mode.
class GroupEncoder {
 public:
  // Appends the call for `first` and the requests linked by `next` to `out`; sets their
  // `shape` and `same_keys`. REQUIRES: all on the token-bucket path, with one `now_us`.
  void Encode(std::string& out, std::string_view sha, ScriptRequest* first);

 private:
  std::vector<std::string_view> shapes_;
  std::vector<uint64_t> key_hashes_;
};

// The general path's reply, {now, committed, then kValuesPerCheck values per check}, into
// `decisions` and the result. REQUIRES: values.size() == 2 + kValuesPerCheck * n for the n
// checks of the call, and decisions.size() >= n.
ApplyResult DecodeDecisions(std::span<const int64_t> values, std::span<core::Decision> decisions);

// The token-bucket path: Redis returns the deficit of each check at `now`, and the decisions
// follow from the same core code as MemoryStore::ApplyNow, on the same state: a bucket with that
// deficit at `now`. The script committed iff this computes `committed` (same exact integers).
// REQUIRES: deficits.size() == checks.size() <= decisions.size().
ApplyResult DecideTokenBuckets(std::span<const Check> checks, bool consume, core::Instant now,
                               std::span<const int64_t> deficits,
                               std::span<core::Decision> decisions);

}  // namespace tollgate::store::redis
