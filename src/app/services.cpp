#include "app/services.hpp"

#include <tollgate/policy/postgres_keys.hpp>

#include "app/store_stacks.hpp"

namespace tollgate::app {

Services::Services(const config::Config& config) {
  if (config.key_source.source != "postgres") return;
  policy::PostgresKeySourceOptions options{.url = config.key_source.url,
                                           .plans = config.plans,
                                           .snapshot_path = config.key_source.snapshot,
                                           .resync_seconds = config.key_source.resync_seconds};
  start_keys_ =
      [options](
          policy::KeySource::ChangeCallback on_change,
          policy::KeySource::LogCallback log) -> core::Result<std::unique_ptr<policy::KeySource>> {
    auto source = policy::PostgresKeySource::Start(options, std::move(on_change), std::move(log));
    if (!source) return core::Error{source.error()};
    return std::unique_ptr<policy::KeySource>(std::move(source).value());
  };
}

std::unique_ptr<Services> Services::Open(const config::Config& config) {
  if (config.store.type == "redis") return OpenRedisStack(config);
  return OpenMemoryStack(config);
}

}  // namespace tollgate::app
