#include <tollgate/usage/usage.hpp>

#include <set>

namespace tollgate::usage {

void MemoryUsageBackend::Add(const UsageDeltas& deltas) {
  std::lock_guard lock(mu_);
  for (const auto& [k, v] : deltas) {
    auto [it, inserted] = rows_.try_emplace(k);
    it->second.Add(v);
    if (inserted) days_.insert(k.day);
  }
  // Day labels sort in time order: drop whole oldest days beyond the limit.
  while (days_.size() > max_days_) {
    const std::string oldest = *days_.begin();
    days_.erase(days_.begin());
    std::erase_if(rows_, [&](const auto& kv) { return kv.first.day == oldest; });
  }
}

void MemoryUsageBackend::Read(std::vector<std::string> days, std::string account,
                              std::function<void(core::Result<UsageRows>)> done) {
  UsageRows out;
  {
    std::lock_guard lock(mu_);
    const std::set<std::string> wanted(days.begin(), days.end());
    for (const auto& [k, v] : rows_) {
      if (wanted.count(k.day) && (account.empty() || k.account == account)) out[k] = v;
    }
  }
  done(std::move(out));
}

}  // namespace tollgate::usage
