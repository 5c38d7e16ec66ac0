// Prometheus counters and histograms, rendered as text for GET /metrics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tollgate::metrics {

// Latency histogram with fixed buckets (seconds). Thread-safe (relaxed atomics).
class Histogram {
 public:
  static constexpr std::array<double, 14> kBuckets = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5};
  void Observe(double seconds);
  void Render(std::string_view name, std::string& out) const;

 private:
  std::array<std::atomic<uint64_t>, kBuckets.size() + 1> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Thread-safe. Counters are created on first use and live as long as the registry.
class Registry {
 public:
  // `labels` is the rendered label set without braces: plan="free",result="allowed".
  std::atomic<uint64_t>& Counter(std::string_view name, std::string_view labels = {});
  Histogram& Hist(std::string_view name);
  // Values a component keeps itself (its own atomics), read when rendering: a counter only
  // grows, a gauge goes up and down. Each component declares its own (its ExportMetrics()).
  // `labels` as Counter()'s; the reads of one name share its help and type.
  void CounterFrom(std::string_view name, std::string_view help, std::function<double()> read,
                   std::string_view labels = {});
  void Gauge(std::string_view name, std::string_view help, std::function<double()> read,
             std::string_view labels = {});

  // HELP text per metric family, declared once (see metrics.cpp for the list).
  std::string Render() const;

  // The counters of family `name` created so far, each with its rendered label set (see
  // Counter()), in label order: what the live page (GET /admin/ui/data) sums per plan.
  struct Sample {
    std::string labels;
    uint64_t value = 0;
  };
  std::vector<Sample> Samples(std::string_view name) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<std::atomic<uint64_t>>> counters_;
  std::map<std::string, std::unique_ptr<Histogram>> histograms_;
  struct Read {
    const char* type;
    std::string help;
    std::function<double()> read;
  };
  void AddRead(std::string_view name, std::string_view labels, const char* type,
               std::string_view help, std::function<double()> read);
  std::map<std::string, Read> reads_;  // by name, '\0', labels
};

// Reads one of a component's atomics, for CounterFrom() and Gauge().
template <typename T>
std::function<double()> ReadOf(const std::atomic<T>& value) {
  return [&value] { return static_cast<double>(value.load(std::memory_order_relaxed)); };
}

// One rendered label, `name="value"`, its value escaped as the text format requires (backslash,
// double quote and line feed).
std::string Label(std::string_view name, std::string_view value);
// The value of label `name` in a rendered label set (`plan="free",result="allowed"`), unescaped;
// nullopt when the set has no such label.
std::optional<std::string> LabelValue(std::string_view labels, std::string_view name);

}  // namespace tollgate::metrics
