// One process, nothing to install: the memory store, decided at once on the caller's thread.
#include <tollgate/store/memory_store.hpp>
#include <tollgate/usage/meter.hpp>
#include <tollgate/usage/usage.hpp>
#include <tollgate/util/name_table.hpp>

#include "app/store_stacks.hpp"

namespace tollgate::app {
namespace {

class MemoryStack final : public Services, public store::Chores {
 public:
  explicit MemoryStack(const config::Config& config)
      : Services(config), memory_(store::MemoryStoreOptions{.max_keys = config.store.max_keys}) {}

  engine::Engine& engine() override { return engine_; }
  http::GatewayServices ForGateway() override {
    return {.engine = engine_,
            .store = *this,
            .replicas = nullptr,
            .meter = meter_,
            .policy = policy_,
            .metrics = metrics_,
            .start_keys = start_keys_};
  }
  void ExportMetrics(metrics::Registry& registry) const override {
    memory_.ExportMetrics(registry);
  }

  // store::Chores
  void CheckReady(std::function<void(bool)> done) override { done(true); }
  void Forget(const store::Batch& batch, std::function<void(std::string)> done) override {
    memory_.Forget(batch);
    done("");
  }
  void Tick(core::Instant now) override {
    if (++ticks_ % 100 == 0) memory_.Sweep(now);  // every 10 s
  }
  store::StoreStatus Status() const override {
    return {.type = util::NameOf(config::kStoreTypeNames, config::StoreType::kMemory)};
  }

 private:
  store::MemoryStore memory_;
  engine::Engine engine_{memory_};
  usage::MemoryUsageBackend usage_;
  usage::UsageMeter meter_{usage_, kUsageSlices};
  int ticks_ = 0;  // Tick()'s thread only
};

}  // namespace

std::unique_ptr<Services> OpenMemoryStack(const config::Config& config) {
  return std::make_unique<MemoryStack>(config);
}

}  // namespace tollgate::app
