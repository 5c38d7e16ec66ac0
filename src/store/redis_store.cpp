// RedisStore: the store's face. Parses and checks the options, owns the lanes and sends each
// call to the lane of the calling thread. The work is in src/store/redis/: a lane (lane.hpp)
// per event loop, with a connection (connection.hpp) per node.
#include <tollgate/store/redis_store.hpp>

#include <tollgate/metrics/metrics.hpp>
#include <tollgate/store/redis_keys.hpp>

#include "store/redis/cluster.hpp"
#include "store/redis/lane.hpp"
#include "store/redis/resp.hpp"
#include "store/redis/script_protocol.hpp"
#include "store/redis/tls.hpp"
#include "store/redis/url.hpp"

namespace tollgate::store {
namespace {

// The lane of the current thread, if it entered one (EnterLane).
thread_local const RedisStore* tl_store = nullptr;
thread_local redis::Lane* tl_lane = nullptr;

}  // namespace

core::Result<std::unique_ptr<RedisStore>> RedisStore::Create(RedisStoreOptions options) {
  auto url = redis::ParseUrl(options.url);
  if (!url) return core::Error{url.error()};
  if (options.timeout_ms <= 0) return core::Error{"store.timeout_ms: must be > 0"};
  std::unique_ptr<boost::asio::ssl::context> tls;
  if (url->tls) {
    auto context = redis::MakeTlsContext(options);
    if (!context) return core::Error{context.error()};
    tls = std::move(context).value();
  } else if (!options.tls_ca_file.empty() || !options.tls_cert_file.empty() ||
             !options.tls_key_file.empty()) {
    return core::Error{"store.tls: only with rediss:// or rediss-cluster://"};
  }
  std::unique_ptr<RedisStore> store(
      new RedisStore(std::make_unique<redis::SharedState>(options, std::move(tls))));
  store->own_lane_ = std::make_unique<redis::Lane>(std::move(options), std::move(url).value(),
                                                   *store->shared_, nullptr);
  return store;
}

RedisStore::RedisStore(std::unique_ptr<redis::SharedState> shared) : shared_(std::move(shared)) {}
RedisStore::~RedisStore() = default;

std::string RedisStore::LastError() const {
  std::lock_guard lock(shared_->error_mu);
  return shared_->last_error;
}

size_t RedisStore::AddLane(boost::asio::io_context& loop) {
  lanes_.push_back(
      std::make_unique<redis::Lane>(own_lane_->options(), own_lane_->url(), *shared_, &loop));
  return lanes_.size() - 1;
}

void RedisStore::EnterLane(size_t lane) {
  tl_store = this;
  tl_lane = lanes_.at(lane).get();
}

void RedisStore::CloseLanes() {
  if (tl_store == this) tl_store = nullptr;
  lanes_.clear();
}

void RedisStore::Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) {
  (tl_store == this ? tl_lane : own_lane_.get())->Apply(batch, decisions, std::move(done));
}

const RedisStoreStats& RedisStore::stats() const { return shared_->stats; }

void RedisStore::ExportMetrics(metrics::Registry& registry) const {
  const RedisStoreStats& st = stats();
  using metrics::ReadOf;
  registry.CounterFrom("tollgate_redis_calls_total", "Decisions sent to Redis.", ReadOf(st.calls));
  registry.CounterFrom("tollgate_redis_scripts_total",
                       "Script calls sent to Redis for those decisions (a group of them is one).",
                       ReadOf(st.scripts));
  registry.CounterFrom(
      "tollgate_redis_command_errors_total",
      "Usage-count commands that failed (sent again if Redis never got them, else lost).",
      ReadOf(st.command_errors));
  registry.CounterFrom("tollgate_redis_timeouts_total", "Redis calls past their deadline.",
                       ReadOf(st.timeouts));
  registry.CounterFrom("tollgate_redis_errors_total", "Redis connection and protocol failures.",
                       ReadOf(st.errors));
  registry.CounterFrom("tollgate_redis_breaker_rejections_total",
                       "Calls failed at once: circuit open.", ReadOf(st.breaker_rejections));
  registry.Gauge("tollgate_redis_breaker_open", "1 while the circuit breaker is open.",
                 ReadOf(st.breaker_open));
  registry.CounterFrom("tollgate_redis_noscript_total", "Script reloads after NOSCRIPT.",
                       ReadOf(st.noscript));
  registry.CounterFrom("tollgate_redis_redirects_total",
                       "Redis Cluster MOVED/ASK redirects followed.", ReadOf(st.redirects));
  registry.CounterFrom("tollgate_redis_reconnects_total", "Redis connections lost and reopened.",
                       ReadOf(st.reconnects));
  registry.CounterFrom("tollgate_redis_master_switches_total",
                       "Redis Sentinel: new masters followed after a failover.",
                       ReadOf(st.master_switches));
}

void RedisStore::Command(std::vector<std::string> args, size_t key_index,
                         std::function<void(core::Result<RedisValue>)> done) {
  own_lane_->Command(std::move(args), key_index, std::move(done));
}

void RedisStore::FireAndForget(std::vector<Fire> commands) {
  own_lane_->FireAndForget(std::move(commands));
}

int RedisStore::KeySlot(std::string_view key) { return redis::HashSlot(key); }

void RedisStore::EncodeCommand(std::string& out, std::initializer_list<std::string_view> args) {
  redis::AppendCommand(out, args);
}

void RedisStore::GiveBack(std::string_view prefix, std::string_view scope, std::string_view name,
                          int64_t tokens, int64_t unit, int64_t rate) {
  Command({"EVAL", std::string(internal::kGiveBackScript), "1",
           redis_keys::Limit(prefix, scope, name,
                             redis::AlgorithmSuffix(core::Algorithm::kTokenBucket)),
           std::to_string(tokens * unit), std::to_string(rate)},
          3, [](core::Result<RedisValue>) {});
}

std::string_view RedisStore::Script() { return internal::kRedisScript; }

std::vector<std::string> RedisStore::KeysOf(std::string_view prefix, const Batch& batch) {
  std::vector<std::string> keys;
  for (const Check& c : batch.checks) {
    keys.push_back(redis_keys::Limit(prefix, c.scope.empty() ? batch.scope : c.scope, c.name,
                                     redis::AlgorithmSuffix(c.limit->algorithm())));
  }
  return keys;
}

}  // namespace tollgate::store
