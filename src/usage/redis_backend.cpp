#include <tollgate/usage/redis_backend.hpp>

#include <atomic>
#include <memory>

#include <tollgate/store/redis_keys.hpp>

namespace tollgate::usage {

using store::RedisValue;
namespace {

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

// The rows of one flush, kept until every reply is in: a row Redis never got goes back into
// the next flush, and a row's index entry and TTLs count as confirmed once all three replies
// are OK. Replies run on the store's thread, one at a time; the last deletes the flight.
struct RedisUsageBackend::Flight {
  struct Row {
    bool requeued = false;
    int index_left = 0;  // replies to come for EXPIRE (hash), SADD and EXPIRE (index)
    bool index_ok = true;
  };
  std::shared_ptr<Unsent> unsent;
  std::shared_ptr<Indexed> indexed;
  UsageDeltas rows;
  std::vector<Row> state;
  size_t left = 0;  // replies to come

  void Reply() {
    if (--left == 0) delete this;
  }
  // A count Redis did not get goes back into the next flush; one that may have reached it is
  // lost and counted (stats().command_errors), not sent twice.
  void OnCounts(size_t row, store::RedisStore::FireResult result) {
    if (result == store::RedisStore::FireResult::kNotRun && !state[row].requeued) {
      state[row].requeued = true;
      std::lock_guard lock(unsent->mu);
      unsent->rows[rows[row].first].Add(rows[row].second);
    }
    Reply();
  }
  void OnIndex(size_t row, store::RedisStore::FireResult result) {
    Row& r = state[row];
    if (result != store::RedisStore::FireResult::kOk) r.index_ok = false;
    if (--r.index_left == 0 && r.index_ok) {
      std::lock_guard lock(indexed->mu);
      if (indexed->done.size() >= 1'000'000) indexed->done.clear();  // bounded
      indexed->done.insert(DayAccount(rows[row].first));
    }
    Reply();
  }
};

std::string RedisUsageBackend::DayAccount(const UsageKey& k) { return k.day + "|" + k.account; }

void RedisUsageBackend::Add(const UsageDeltas& fresh) {
  auto flight = std::make_unique<Flight>();
  Flight* f = flight.get();
  f->unsent = unsent_;
  f->indexed = indexed_;
  {
    std::lock_guard lock(unsent_->mu);
    f->rows.reserve(fresh.size() + unsent_->rows.size());
    for (auto& row : unsent_->rows) f->rows.emplace_back(row.first, row.second);
    unsent_->rows.clear();
  }
  f->rows.insert(f->rows.end(), fresh.begin(), fresh.end());
  if (f->rows.empty()) return;
  f->state.resize(f->rows.size());
  // Which rows still need their index entry and TTLs: all of them again after a lost connection,
  // which may have been a Redis restart that lost its data.
  {
    std::lock_guard lock(indexed_->mu);
    const uint64_t reconnects = redis_.stats().reconnects.load(std::memory_order_relaxed);
    if (reconnects != indexed_->reconnects) {
      indexed_->done.clear();
      indexed_->reconnects = reconnects;
    }
    for (size_t row = 0; row < f->rows.size(); ++row) {
      if (!indexed_->done.count(DayAccount(f->rows[row].first))) f->state[row].index_left = 3;
    }
  }
  std::vector<store::RedisStore::Fire> commands;
  const std::string ttl = std::to_string(retention_s_);
  std::string field;
  commands.reserve(f->rows.size());
  for (size_t row = 0; row < f->rows.size(); ++row) {
    const auto& [k, v] = f->rows[row];
    const std::string key = store::redis_keys::Usage(prefix_, k.account, k.day);
    const int slot = store::RedisStore::KeySlot(key);
    // Every HINCRBY of the row, in one go. A request usually costs 1, so the cost is kept as
    // what it adds to the request count: one HINCRBY per outcome, not two.
    store::RedisStore::Fire counts{
        {}, slot, [f, row](store::RedisStore::FireResult r) { f->OnCounts(row, r); }, 0};
    counts.command.reserve(128);
    for (size_t i = 0; i < kOutcomes; ++i) {
      for (const bool extra : {false, true}) {
        const int64_t n = extra ? v.cost[i] - v.requests[i] : v.requests[i];
        if (n == 0) continue;
        field.assign(k.key_id)
            .append("|")
            .append(kOutcomeNames[i])
            .append(extra ? "|extra_cost" : "|requests");
        store::RedisStore::EncodeCommand(counts.command,
                                         {"HINCRBY", key, field, std::to_string(n)});
        ++counts.replies;
      }
    }
    f->left += counts.replies;
    if (counts.replies > 0) commands.push_back(std::move(counts));
    if (f->state[row].index_left == 0) continue;
    // Sent with every flush until confirmed.
    f->left += 3;
    auto confirm = [f, row](store::RedisStore::FireResult r) { f->OnIndex(row, r); };
    const std::string index = store::redis_keys::UsageIndex(prefix_, k.day);
    store::RedisStore::Fire& expire =
        commands.emplace_back(store::RedisStore::Fire{{}, slot, confirm});
    store::RedisStore::EncodeCommand(expire.command, {"EXPIRE", key, ttl});
    // The day's index and its TTL: one write, two replies.
    store::RedisStore::Fire& add = commands.emplace_back(
        store::RedisStore::Fire{{}, store::RedisStore::KeySlot(index), confirm, 2});
    store::RedisStore::EncodeCommand(add.command, {"SADD", index, k.account});
    store::RedisStore::EncodeCommand(add.command, {"EXPIRE", index, ttl});
  }
  if (f->left == 0) return;  // rows of zeros: nothing sent
  (void)flight.release();    // the replies own it now: the last one deletes it
  redis_.FireAndForget(std::move(commands));
}

void RedisUsageBackend::Read(std::vector<std::string> days, std::string account,
                             std::function<void(core::Result<UsageRows>)> done) {
  auto g = std::make_shared<Gather>();
  g->done = std::move(done);
  g->left = 1;  // released at the end of this function
  auto read_hash = [this, g](const std::string& day, const std::string& acct) {
    g->left.fetch_add(1);
    redis_.Command({"HGETALL", store::redis_keys::Usage(prefix_, acct, day)}, 1,
                   [g, day, acct](core::Result<RedisValue> r) {
                     {
                       std::lock_guard lock(g->mu);
                       const auto* items =
                           r ? std::get_if<std::vector<RedisValue>>(&r->v) : nullptr;
                       if (!items) {
                         g->error = r ? "unexpected reply" : r.error();
                       } else {
                         for (size_t i = 0; i + 1 < items->size(); i += 2) {
                           const auto* field = std::get_if<std::string>(&(*items)[i].v);
                           const auto* value = std::get_if<std::string>(&(*items)[i + 1].v);
                           if (!field || !value) continue;
                           // "<key_id>|<outcome>|<requests|extra_cost>"; key ids may not contain
                           // '|'. The cost is the requests plus the extra cost.
                           const size_t b = field->rfind('|');
                           const size_t a = b == std::string::npos ? b : field->rfind('|', b - 1);
                           if (a == std::string::npos) continue;
                           const std::string outcome = field->substr(a + 1, b - a - 1);
                           const std::string what = field->substr(b + 1);
                           if (what != "requests" && what != "extra_cost") continue;
                           for (size_t o = 0; o < kOutcomes; ++o) {
                             if (outcome != kOutcomeNames[o]) continue;
                             UsageCounts& c = g->rows[UsageKey{day, acct, field->substr(0, a)}];
                             const int64_t n = std::stoll(*value);
                             c.cost[o] += n;
                             if (what == "requests") c.requests[o] += n;
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
    redis_.Command({"SMEMBERS", store::redis_keys::UsageIndex(prefix_, day)}, 1,
                   [g, day, read_hash](core::Result<RedisValue> r) {
                     const auto* items = r ? std::get_if<std::vector<RedisValue>>(&r->v) : nullptr;
                     if (!items) {
                       std::lock_guard lock(g->mu);
                       g->error = r ? "unexpected reply" : r.error();
                     } else {
                       for (const RedisValue& m : *items) {
                         if (const auto* acct = std::get_if<std::string>(&m.v))
                           read_hash(day, *acct);
                       }
                     }
                     g->Finish();
                   });
  }
  g->Finish();
}

}  // namespace tollgate::usage
