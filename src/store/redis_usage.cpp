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

// The rows of one flush, kept until every reply is in, so that a row Redis never got can go
// back into the next flush. Replies run on the store's thread, one at a time.
struct RedisUsageBackend::Flight {
  std::shared_ptr<Unsent> unsent;
  UsageDeltas rows;
  std::vector<bool> requeued;
  size_t left = 0;  // replies to come
};

void RedisUsageBackend::Add(const UsageDeltas& fresh) {
  auto flight = std::make_unique<Flight>();
  flight->unsent = unsent_;
  {
    std::lock_guard lock(unsent_->mu);
    flight->rows.reserve(fresh.size() + unsent_->rows.size());
    for (auto& row : unsent_->rows) flight->rows.emplace_back(row.first, row.second);
    unsent_->rows.clear();
  }
  flight->rows.insert(flight->rows.end(), fresh.begin(), fresh.end());
  if (flight->rows.empty()) return;
  flight->requeued.assign(flight->rows.size(), false);
  Flight* f = flight.get();
  // A count Redis did not get goes back into the next flush; one that may have reached it is
  // lost and counted (stats().command_errors), not sent twice.
  auto on_counts = [f](size_t row) {
    return [f, row](RedisStore::FireResult result) {
      if (result == RedisStore::FireResult::kNotSent && !f->requeued[row]) {
        f->requeued[row] = true;
        std::lock_guard lock(f->unsent->mu);
        f->unsent->rows[f->rows[row].first].Add(f->rows[row].second);
      }
      if (--f->left == 0) delete f;
    };
  };
  std::vector<RedisStore::Fire> commands;
  const std::string ttl = std::to_string(retention_s_);
  std::string field;
  commands.reserve(f->rows.size());
  for (size_t row = 0; row < f->rows.size(); ++row) {
    const auto& [k, v] = f->rows[row];
    const std::string key = HashKey(prefix_, k.account, k.day);
    const int slot = RedisStore::KeySlot(key);
    RedisStore::Fire counts{{}, slot, on_counts(row), 0};  // every HINCRBY of the row, in one go
    counts.command.reserve(128);
    for (size_t i = 0; i < kOutcomes; ++i) {
      for (const bool cost : {false, true}) {
        const int64_t n = cost ? v.cost[i] : v.requests[i];
        if (n == 0) continue;
        field.assign(k.key_id).append("|").append(kOutcomeNames[i]).append(cost ? "|cost" : "|requests");
        RedisStore::EncodeCommand(counts.command, {"HINCRBY", key, field, std::to_string(n)});
        ++counts.replies;
      }
    }
    f->left += counts.replies;
    if (counts.replies > 0) commands.push_back(std::move(counts));
    std::string day_account = k.day + "|" + k.account;
    {
      std::lock_guard lock(indexed_->mu);
      // A lost connection may have been a Redis restart that lost its data: confirm again.
      const uint64_t reconnects = redis_.stats().reconnects.load(std::memory_order_relaxed);
      if (reconnects != indexed_->reconnects) {
        indexed_->done.clear();
        indexed_->reconnects = reconnects;
      }
      if (indexed_->done.count(day_account)) continue;
    }
    // Confirmed when all three succeeded; until then every flush sends them again.
    struct Pending {
      std::shared_ptr<Indexed> indexed;
      std::string day_account;
      std::atomic<int> left{3};
      std::atomic<bool> ok{true};
    };
    auto pending = std::make_shared<Pending>();
    pending->indexed = indexed_;
    pending->day_account = std::move(day_account);
    auto confirm = [pending](RedisStore::FireResult result) {
      if (result != RedisStore::FireResult::kOk) pending->ok.store(false);
      if (pending->left.fetch_sub(1) != 1 || !pending->ok.load()) return;
      std::lock_guard lock(pending->indexed->mu);
      if (pending->indexed->done.size() >= 1'000'000) pending->indexed->done.clear();  // bounded
      pending->indexed->done.insert(pending->day_account);
    };
    const std::string index = prefix_ + ":usage:" + k.day;
    RedisStore::Fire& expire = commands.emplace_back(RedisStore::Fire{{}, slot, confirm});
    RedisStore::EncodeCommand(expire.command, {"EXPIRE", key, ttl});
    // The day's index and its TTL: one write, two replies.
    RedisStore::Fire& add = commands.emplace_back(RedisStore::Fire{{}, RedisStore::KeySlot(index), confirm, 2});
    RedisStore::EncodeCommand(add.command, {"SADD", index, k.account});
    RedisStore::EncodeCommand(add.command, {"EXPIRE", index, ttl});
  }
  if (f->left > 0) flight.release();  // deleted by its last reply
  if (!commands.empty()) redis_.FireAndForget(std::move(commands));
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
