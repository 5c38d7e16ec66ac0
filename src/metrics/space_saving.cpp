#include <tollgate/metrics/space_saving.hpp>

#include <algorithm>

namespace tollgate::metrics {

void SpaceSaving::Add(std::string_view key, uint64_t weight) {
  total_ += weight;
  if (auto it = index_.find(key); it != index_.end()) {
    counts_[it->second] += weight;
    return;
  }
  if (keys_.size() < capacity_) {
    index_.emplace(std::string(key), keys_.size());
    keys_.emplace_back(key);
    counts_.push_back(weight);
    errors_.push_back(0);
    return;
  }
  // Full: the key takes the place of the smallest counter, inheriting its count as its error.
  const size_t m = Smallest();
  auto node = index_.extract(keys_[m]);  // reused: no allocation per eviction
  keys_[m].assign(key);
  node.key() = keys_[m];
  index_.insert(std::move(node));
  errors_[m] = counts_[m];
  counts_[m] += weight;
}

size_t SpaceSaving::Smallest() {
  const size_t n = counts_.size();
  for (size_t i = 0, at = cursor_; i < n; ++i, at = at + 1 == n ? 0 : at + 1) {
    if (counts_[at] == floor_) return cursor_ = at;
  }
  // None left at the floor: it rose.
  cursor_ = static_cast<size_t>(std::min_element(counts_.begin(), counts_.end()) - counts_.begin());
  floor_ = counts_[cursor_];
  return cursor_;
}

uint64_t SpaceSaving::Floor() const {
  if (keys_.size() < capacity_ || counts_.empty()) return 0;
  return *std::min_element(counts_.begin(), counts_.end());
}

void SpaceSaving::Merge(const SpaceSaving& other) {
  // Sum the counters of both; keep the `capacity_` largest. A key held by one sketch only may
  // have had up to the other's smallest count there: that joins its error.
  const uint64_t mine = Floor(), theirs = other.Floor();
  std::unordered_map<std::string, Item> all;
  for (size_t i = 0; i < keys_.size(); ++i)
    all[keys_[i]] = {keys_[i], counts_[i] + theirs, errors_[i] + theirs};
  for (size_t i = 0; i < other.keys_.size(); ++i) {
    auto [it, fresh] = all.try_emplace(
        other.keys_[i], Item{other.keys_[i], other.counts_[i] + mine, other.errors_[i] + mine});
    if (!fresh) {
      it->second.count += other.counts_[i] - theirs;
      it->second.error += other.errors_[i] - theirs;
    }
  }
  std::vector<Item> merged;
  merged.reserve(all.size());
  for (auto& [k, item] : all) merged.push_back(std::move(item));
  std::sort(merged.begin(), merged.end(), [](const Item& a, const Item& b) {
    return a.count != b.count ? a.count > b.count : a.key < b.key;
  });
  if (merged.size() > capacity_) merged.resize(capacity_);
  const uint64_t total = total_ + other.total_;
  Clear();
  total_ = total;
  for (Item& item : merged) {
    index_.emplace(item.key, keys_.size());
    keys_.push_back(std::move(item.key));
    counts_.push_back(item.count);
    errors_.push_back(item.error);
  }
}

std::vector<SpaceSaving::Item> SpaceSaving::Top(size_t n) const {
  std::vector<Item> out;
  out.reserve(keys_.size());
  for (size_t i = 0; i < keys_.size(); ++i) out.push_back({keys_[i], counts_[i], errors_[i]});
  std::sort(out.begin(), out.end(), [](const Item& a, const Item& b) {
    return a.count != b.count ? a.count > b.count : a.key < b.key;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

void SpaceSaving::Clear() {
  keys_.clear();
  counts_.clear();
  errors_.clear();
  index_.clear();
  total_ = 0;
  floor_ = 0;
  cursor_ = 0;
}

}  // namespace tollgate::metrics
