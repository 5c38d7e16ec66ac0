// Replicas sharing one Redis (or Redis Cluster, or a Sentinel group): the Redis store, token
// leases (limits with `lease:`) below the exact deny cache, the local store fail_mode: local
// falls back to, usage in Redis, and what the replicas share (deny entries, resets, heartbeats).
#include <atomic>
#include <mutex>

#include <tollgate/engine/deny_cache.hpp>
#include <tollgate/store/leasing_store.hpp>
#include <tollgate/store/memory_store.hpp>
#include <tollgate/store/redis_shared.hpp>
#include <tollgate/store/redis_store.hpp>
#include <tollgate/usage/meter.hpp>
#include <tollgate/usage/redis_backend.hpp>
#include <tollgate/util/hash.hpp>
#include <tollgate/util/name_table.hpp>

#include "app/store_stacks.hpp"

namespace tollgate::app {
namespace {

std::unique_ptr<store::RedisStore> OpenRedis(const config::StoreConfig& sc) {
  auto r = store::RedisStore::Create({.url = sc.url,
                                      .prefix = sc.prefix,
                                      .timeout_ms = sc.timeout_ms,
                                      .connect_timeout_ms = sc.connect_timeout_ms,
                                      .tls_ca_file = sc.tls_ca_file,
                                      .tls_cert_file = sc.tls_cert_file,
                                      .tls_key_file = sc.tls_key_file});
  if (!r) throw std::runtime_error(r.error());
  return std::move(r).value();
}

class RedisStack final : public Services, public store::Chores, public store::Replicas {
 public:
  explicit RedisStack(const config::Config& config)
      : Services(config),
        prefix_(config.store.prefix),
        redis_(OpenRedis(config.store)),
        shared_(*redis_, prefix_),
        leasing_(
            *redis_,
            [this](const store::Unspent& u) {
              redis_->GiveBack(prefix_, u.scope, u.name, u.tokens, u.unit, u.rate);
            },
            store::LeasingStore::Options{}),
        deny_cache_(config.store.deny_cache ? std::make_unique<engine::DenyCache>(leasing_)
                                            : nullptr),
        local_(store::MemoryStoreOptions{.max_keys = config.store.max_keys}),
        engine_(deny_cache_ ? static_cast<store::Store&>(*deny_cache_) : leasing_),
        usage_(*redis_, prefix_) {
    engine_.SetLocal(local_, [this] { return Seen(); });
    if (config.store.replicas > 0) {
      replicas_seen_ = config.store.replicas;
    } else {
      instance_id_ = std::to_string(util::internal::RandomSeed());  // counted by heartbeats
    }
  }

  engine::Engine& engine() override { return engine_; }
  http::GatewayServices ForGateway() override {
    return {.engine = engine_,
            .store = *this,
            .replicas = this,
            .meter = meter_,
            .policy = policy_,
            .metrics = metrics_,
            .start_keys = start_keys_};
  }
  void ExportMetrics(metrics::Registry& registry) const override {
    redis_->ExportMetrics(registry);
    if (deny_cache_) deny_cache_->ExportMetrics(registry);
    leasing_.ExportMetrics(registry);
    registry.Gauge("tollgate_replicas",
                   "Replicas sharing the store, among which fail_mode: local divides each limit.",
                   [this] { return static_cast<double>(Seen()); });
  }

  // store::Chores
  void CheckReady(std::function<void(bool)> done) override { shared_.Ping(std::move(done)); }
  void Forget(const store::Batch& batch, std::function<void(std::string)> done) override {
    if (deny_cache_) deny_cache_->Forget(batch.scope);
    leasing_.Forget();
    shared_.ForgetLimits(batch, std::move(done));  // the other replicas follow the epoch
  }
  void Tick(core::Instant now) override {
    ++ticks_;
    if (ticks_ % 10 == 5) FollowResets();
    if (ticks_ % 100 == 0) local_.Sweep(now);
    leasing_.Sweep();
  }
  store::StoreStatus Status() const override {
    const store::RedisStoreStats& s = redis_->stats();
    return {.type = util::NameOf(config::kStoreTypeNames, config::StoreType::kRedis),
            .breaker_open = s.breaker_open.load(std::memory_order_relaxed) != 0,
            .timeouts = s.timeouts.load(),
            .errors = s.errors.load(),
            .last_error = redis_->LastError()};
  }
  size_t AddLane(boost::asio::io_context& loop) override { return redis_->AddLane(loop); }
  void EnterLane(size_t lane) override { redis_->EnterLane(lane); }
  void CloseLanes() override { redis_->CloseLanes(); }

  // store::Replicas
  void ChangeDenyEntry(bool add, std::string entry) override {
    shared_.ChangeDenyEntry(add, std::move(entry));
  }
  void ReadDenyEntries(std::function<void(std::optional<std::vector<std::string>>)> done) override {
    shared_.ReadDenyEntries(std::move(done));
  }
  void Beat() override {
    if (instance_id_.empty()) return;  // store.replicas is configured
    // Redis unreachable: the count last seen stays, for fail_mode: local.
    shared_.Beat(instance_id_, [this](int n) { replicas_seen_.store(n); });
  }
  int Seen() const override { return replicas_seen_.load(std::memory_order_relaxed); }

 private:
  // A reset on any replica moves the epoch: the caches here forget everything. The first
  // reading clears too: a reset may have come before it (a cleared cache only costs store
  // calls).
  void FollowResets() {
    shared_.ReadResetEpoch([this](std::optional<std::string> epoch) {
      if (!epoch) return;  // Redis unreachable
      std::lock_guard lock(epoch_mu_);
      if (*epoch != reset_epoch_) {
        if (deny_cache_) deny_cache_->Clear();
        // Tokens taken before a reset are no one's. Not at the first reading: the leases of a
        // replica that just started were taken after any earlier reset.
        if (!reset_epoch_.empty()) leasing_.Forget();
      }
      reset_epoch_ = *epoch;
    });
  }

  const std::string prefix_;
  std::unique_ptr<store::RedisStore> redis_;
  store::RedisShared shared_;
  store::LeasingStore leasing_;
  std::unique_ptr<engine::DenyCache> deny_cache_;  // store.deny_cache
  store::MemoryStore local_;                       // fail_mode: local's, while Redis fails
  engine::Engine engine_;
  usage::RedisUsageBackend usage_;
  usage::UsageMeter meter_{usage_, kUsageSlices};
  std::atomic<int> replicas_seen_{1};
  std::string instance_id_;  // empty: store.replicas is configured
  std::mutex epoch_mu_;
  std::string reset_epoch_;  // as last read; under epoch_mu_
  int ticks_ = 0;            // Tick()'s thread only
};

}  // namespace

std::unique_ptr<Services> OpenRedisStack(const config::Config& config) {
  return std::make_unique<RedisStack>(config);
}

}  // namespace tollgate::app
