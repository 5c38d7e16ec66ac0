#include "store/redis/script_protocol.hpp"

#include <algorithm>
#include <charconv>
#include <string>
#include <tollgate/store/redis_keys.hpp>
#include <tollgate/util/hash.hpp>
#include <tollgate/util/text.hpp>
#include <type_traits>
#include <variant>

#include "store/redis/resp.hpp"

namespace tollgate::store::redis {
namespace {

// The keys of `batch`, as bulk strings. Returns where the first one's text starts in `out` and
// its length ({0, 0} when there is none).
std::pair<size_t, size_t> AppendKeys(util::StringAppender& text, std::string_view prefix,
                                     const Batch& batch) {
  std::pair<size_t, size_t> first{0, 0};
  for (const Check& c : batch.checks) {
    const std::string_view suffix = AlgorithmSuffix(c.limit->algorithm());
    const std::string_view scope = c.scope.empty() ? batch.scope : c.scope;
    const size_t len = redis_keys::LimitSize(prefix, scope, c.name, suffix);
    text << "$" << len << "\r\n";
    if (first.first == 0) first = {text.size(), len};
    redis_keys::AppendLimit(text, prefix, scope, c.name, suffix);
    text << "\r\n";
  }
  return first;
}

// The mode and the per-check arguments (redis_script.lua), on either path.
void AppendArguments(util::StringAppender& text, ScriptRequest& request, const Batch& batch) {
  if (request.fast) {
    AppendBulk(text, request.consume ? "B" : "b");
    request.params_begin = text.size();
    for (const Check& c : batch.checks) {
      for (int64_t v : TokenBucketParams(*c.limit, c.cost, c.enforced, c.may_delay)) {
        AppendBulk(text, v);
      }
    }
    return;
  }
  AppendBulk(text, request.consume ? "1" : "0");
  for (const Check& c : batch.checks) {
    AppendBulk(text, static_cast<int64_t>(c.limit->algorithm()));
    AppendBulk(text, c.cost);
    AppendBulk(text, c.enforced ? "1" : "0");
    for (int64_t p : ScriptParams(*c.limit, c.may_delay)) AppendBulk(text, p);
  }
}

// Adds the hash of each of `keys`, RESP-encoded ("$<len>\r\n<key>\r\n"), to `out`.
void HashKeys(std::string_view keys, std::vector<uint64_t>& out) {
  while (keys.size() > 1) {
    size_t len = 0;
    const char* digits = std::from_chars(keys.data() + 1, keys.data() + keys.size(), len).ptr;
    const size_t begin = static_cast<size_t>(digits - keys.data()) + 2;
    out.push_back(util::Hash64(keys.substr(begin, len)));
    keys.remove_prefix(std::min(keys.size(), begin + len + 2));
  }
}

std::string_view KeysOf(const ScriptRequest* r) {
  return std::string_view(r->command).substr(r->keys_begin, r->keys_end - r->keys_begin);
}

}  // namespace

const char* AlgorithmSuffix(core::Algorithm a) {
  switch (a) {
    case core::Algorithm::kTokenBucket:
      return "tb";
    case core::Algorithm::kSlidingWindowLog:
      return "log";
    case core::Algorithm::kSlidingWindowCounter:
      return "swc";
    case core::Algorithm::kFixedWindow:
      return "fw";
    case core::Algorithm::kQuota:
      return "q";
  }
  return "x";
}

std::array<int64_t, 4> ScriptParams(const core::Limit& limit, bool may_delay) {
  return std::visit(
      [may_delay](const auto& impl) -> std::array<int64_t, 4> {
        using T = std::decay_t<decltype(impl)>;
        if constexpr (std::is_same_v<T, core::TokenBucket>) {
          return {impl.capacity(), impl.rate().tokens, impl.rate().per_micros,
                  may_delay ? impl.debt_units() : 0};
        } else if constexpr (std::is_same_v<T, core::SlidingLog>) {
          return {impl.limit(), impl.window().micros(), 0, 0};
        } else if constexpr (std::is_same_v<T, core::SlidingCounter>) {
          return {impl.limit(), impl.window().micros() / 1000, 0, 0};
        } else if constexpr (std::is_same_v<T, core::FixedWindow>) {
          return {impl.limit(), impl.window().micros(), 0, 0};
        } else {
          return {impl.period() == core::Period::kDay ? 0 : 1, impl.allowance().value_or(0),
                  impl.ceiling().value_or(0), 0};
        }
      },
      limit.impl());
}

std::array<int64_t, 5> TokenBucketParams(const core::Limit& limit, int64_t cost, bool enforced,
                                         bool may_delay) {
  const auto& tb = std::get<core::TokenBucket>(limit.impl());
  const int64_t unit = tb.rate().per_micros;
  const int64_t full = tb.capacity() * unit;  // < 2^53 (TokenBucket::Create)
  // A cost above the capacity never passes (room < 0) and is never debited: its product with the
  // unit, which could overflow, is not needed.
  const int64_t need = cost > tb.capacity() ? 0 : cost * unit;
  // Smoothing: the deficit may pass the capacity by the debt (the requests held meanwhile).
  const int64_t debt = may_delay ? tb.debt_units() : 0;
  const int64_t room = cost > tb.capacity() ? -1 : full + debt - need;
  // The key lives as long as the deepest deficit it can hold takes to refill (an empty bucket:
  // the policy's window, C/r; plus the debt), so an expired key is always a full bucket.
  const int64_t refill_us = (full + tb.debt_units() + tb.rate().tokens - 1) / tb.rate().tokens;
  const int64_t ttl_ms = std::max<int64_t>(1, (refill_us + 999) / 1000);
  return {need, tb.rate().tokens, ttl_ms, room, enforced ? 1 : 0};
}

std::string_view EncodeRequest(ScriptRequest& request, std::string_view sha,
                               std::string_view prefix, const Batch& batch) {
  request.n = batch.checks.size();
  request.consume = batch.mode == Mode::kConsume;
  request.fast =
      request.n > 0 && std::all_of(batch.checks.begin(), batch.checks.end(), [](const Check& c) {
        return c.limit->algorithm() == core::Algorithm::kTokenBucket;
      });
  std::string& cmd = request.command;
  cmd.clear();
  request.args = 3 + request.n + 2 + (request.fast ? 5 : 7) * request.n;
  std::pair<size_t, size_t> first_key;
  {
    util::StringAppender text(cmd);
    text << "*" << request.args << "\r\n";
    AppendBulk(text, "EVALSHA");
    AppendBulk(text, sha);
    request.header_len = text.size();
    AppendBulk(text, static_cast<int64_t>(request.n));
    request.keys_begin = text.size();
    first_key = AppendKeys(text, prefix, batch);
    request.keys_end = text.size();
    request.now_us = batch.now ? batch.now->unix_micros() : 0;
    AppendBulk(text, request.now_us);
    AppendArguments(text, request, batch);
  }
  return std::string_view(cmd).substr(first_key.first, first_key.second);
}

std::string EncodeEval(const ScriptRequest& request, std::string_view script) {
  std::string eval = "*";
  util::AppendDecimal(eval, static_cast<int64_t>(request.args));
  eval += "\r\n";
  AppendBulk(eval, "EVAL");
  AppendBulk(eval, script);
  eval.append(request.command, request.header_len);
  return eval;
}

void GroupEncoder::Encode(std::string& out, std::string_view sha, ScriptRequest* first) {
  shapes_.clear();
  key_hashes_.clear();
  bool unique = true;
  size_t keys = 0;
  size_t requests = 0;
  size_t shape_args = 0;
  const ScriptRequest* previous = nullptr;
  for (ScriptRequest* c = first; c; previous = c, c = c->next) {
    // One busy key's requests often follow one another: its keys go once.
    c->same_keys = previous && KeysOf(c) == KeysOf(previous);
    if (!c->same_keys) keys += c->n;
    unique = unique && !c->same_keys;
    if (unique) HashKeys(KeysOf(c), key_hashes_);
    ++requests;
    const std::string_view params = std::string_view(c->command).substr(c->params_begin);
    const auto it = std::find(shapes_.begin(), shapes_.end(), params);
    c->shape = static_cast<size_t>(it - shapes_.begin());
    if (it == shapes_.end()) {
      shapes_.push_back(params);
      shape_args += 1 + 5 * c->n;
    }
  }
  if (unique) {  // two keys of one hash count as the same
    std::sort(key_hashes_.begin(), key_hashes_.end());
    unique = std::adjacent_find(key_hashes_.begin(), key_hashes_.end()) == key_hashes_.end();
  }
  util::StringAppender text(out);
  text << "*" << 3 + keys + 3 + shape_args + requests << "\r\n";
  AppendBulk(text, "EVALSHA");
  AppendBulk(text, sha);
  AppendBulk(text, static_cast<int64_t>(keys));
  for (const ScriptRequest* c = first; c; c = c->next) {
    if (!c->same_keys) text << KeysOf(c);
  }
  AppendBulk(text, first->now_us);
  AppendBulk(text, unique ? "U" : "M");
  AppendBulk(text, static_cast<int64_t>(shapes_.size()));
  size_t next_shape = 0;
  for (const ScriptRequest* c = first; c; c = c->next) {
    if (c->shape != next_shape) continue;  // first seen here: its shape goes out now
    AppendBulk(text, static_cast<int64_t>(c->n));
    text << shapes_[next_shape];
    ++next_shape;
  }
  for (const ScriptRequest* c = first; c; c = c->next) {
    AppendBulk(text, static_cast<int64_t>(4 * (c->shape + 1) + (c->same_keys ? 2 : 0) +
                                          (c->consume ? 1 : 0)));
  }
}

ApplyResult DecodeDecisions(std::span<const int64_t> values, std::span<core::Decision> decisions) {
  const size_t n = (values.size() - 2) / kValuesPerCheck;
  for (size_t i = 0; i < n; ++i) {
    const std::span<const int64_t> v = values.subspan(2 + i * kValuesPerCheck, kValuesPerCheck);
    core::Decision& d = decisions[i];
    d.allowed = v[0] == 1;
    d.code = static_cast<core::RejectCode>(v[1]);
    d.limit = v[2];
    d.remaining = v[3];
    d.reset = core::Duration::Micros(v[4]);
    d.retry_after = v[5] < 0 ? core::Duration::Infinite() : core::Duration::Micros(v[5]);
    d.used = v[6];
    d.over_allowance = v[7] == 1;
    d.delay = core::Duration::Micros(v[8]);
  }
  ApplyResult result;
  result.committed = values[1] == 1;
  result.now = core::Instant::FromUnixMicros(values[0]);
  return result;
}

ApplyResult DecideTokenBuckets(std::span<const Check> checks, bool consume, core::Instant now,
                               std::span<const int64_t> deficits,
                               std::span<core::Decision> decisions) {
  bool commit = consume;
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    core::State state{deficits[i], now.unix_micros()};
    decisions[i] = c.limit->Evaluate(state, c.cost, now, c.may_delay);
    if (!decisions[i].allowed && c.enforced) commit = false;
  }
  if (!commit) {
    // As MemoryStore: nothing changed, so allowed checks report their state as it is.
    for (size_t i = 0; i < checks.size(); ++i) {
      const Check& c = checks[i];
      if (!decisions[i].allowed || c.cost == 0) continue;
      core::State state{deficits[i], now.unix_micros()};
      decisions[i] = c.limit->Evaluate(state, 0, now);
    }
  }
  ApplyResult result;
  result.committed = commit;
  result.now = now;
  return result;
}

}  // namespace tollgate::store::redis
