#include <tollgate/store/redis_usage.hpp>

#include <atomic>
#include <memory>

namespace tollgate::store {
namespace {

std::string HashKey(const std::string& prefix, const std::string& account, const std::string& day) {
  return prefix + ":{usage:" + account + "}:" + day;
}

// Collects the replies of several commands and calls `done` once, after the last one.
struct Gather {
  std::mutex mu;
  UsageRows rows;
  std::string error;
  std::atomic<int> left{0};
  std::function<void(core::Result<UsageRows>)> done;
  void Finish() {
    if (left.fetch_sub(1) != 1) return;
    if (!error.empty()) return done(core::Error{error});
    done(std::move(rows));
  }
};

}  // namespace

void RedisUsageBackend::Add(const UsageRows& deltas) {
  for (const auto& [k, v] : deltas) {
    const std::string key = HashKey(prefix_, k.account, k.day);
    for (size_t i = 0; i < kOutcomes; ++i) {
      const std::string field = k.key_id + "|" + kOutcomeNames[i];
      if (v.requests[i]) {
        redis_.Command({"HINCRBY", key, field + "|requests", std::to_string(v.requests[i])}, 1, [](auto) {});
      }
      if (v.cost[i]) {
        redis_.Command({"HINCRBY", key, field + "|cost", std::to_string(v.cost[i])}, 1, [](auto) {});
      }
    }
    redis_.Command({"EXPIRE", key, std::to_string(retention_s_)}, 1, [](auto) {});
    const std::string index = prefix_ + ":usage:" + k.day;
    redis_.Command({"SADD", index, k.account}, 1, [](auto) {});
    redis_.Command({"EXPIRE", index, std::to_string(retention_s_)}, 1, [](auto) {});
  }
}

void RedisUsageBackend::Read(std::vector<std::string> days, std::string account,
                             std::function<void(core::Result<UsageRows>)> done) {
  auto g = std::make_shared<Gather>();
  g->done = std::move(done);
  g->left = 1;  // released at the end of this function
  auto read_hash = [this, g](const std::string& day, const std::string& acct) {
    g->left.fetch_add(1);
    redis_.Command({"HGETALL", HashKey(prefix_, acct, day)}, 1, [g, day, acct](core::Result<RedisValue> r) {
      {
        std::lock_guard lock(g->mu);
        const auto* items = r ? std::get_if<std::vector<RedisValue>>(&r->v) : nullptr;
        if (!items) {
          g->error = r ? "unexpected reply" : r.error();
        } else {
          for (size_t i = 0; i + 1 < items->size(); i += 2) {
            const auto* field = std::get_if<std::string>(&(*items)[i].v);
            const auto* value = std::get_if<std::string>(&(*items)[i + 1].v);
            if (!field || !value) continue;
            // "<key_id>|<outcome>|<requests|cost>"; key ids may not contain '|'.
            const size_t b = field->rfind('|');
            const size_t a = b == std::string::npos ? b : field->rfind('|', b - 1);
            if (a == std::string::npos) continue;
            const std::string outcome = field->substr(a + 1, b - a - 1);
            for (size_t o = 0; o < kOutcomes; ++o) {
              if (outcome != kOutcomeNames[o]) continue;
              UsageCounts& c = g->rows[UsageKey{day, acct, field->substr(0, a)}];
              (field->substr(b + 1) == "cost" ? c.cost : c.requests)[o] += std::stoll(*value);
            }
          }
        }
      }
      g->Finish();
    });
  };
  for (const std::string& day : days) {
    if (!account.empty()) {
      read_hash(day, account);
      continue;
    }
    g->left.fetch_add(1);
    redis_.Command({"SMEMBERS", prefix_ + ":usage:" + day}, 1,
                   [g, day, read_hash](core::Result<RedisValue> r) {
                     const auto* items = r ? std::get_if<std::vector<RedisValue>>(&r->v) : nullptr;
                     if (!items) {
                       std::lock_guard lock(g->mu);
                       g->error = r ? "unexpected reply" : r.error();
                     } else {
                       for (const RedisValue& m : *items) {
                         if (const auto* acct = std::get_if<std::string>(&m.v)) read_hash(day, *acct);
                       }
                     }
                     g->Finish();
                   });
  }
  g->Finish();
}

}  // namespace tollgate::store
