#include <tollgate/usage/meter.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>

#include <tollgate/core/calendar.hpp>

namespace tollgate::usage {
namespace {

bool ParseInt(std::string_view s, int& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string DayLabel(int64_t days) {
  return core::PeriodLabel(core::Period::kDay, core::Instant::FromUnixSeconds(days * 86'400));
}

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace

core::Result<std::vector<std::string>> DaysOfPeriod(std::string_view period) {
  int y = 0, m = 0, d = 0;
  const bool is_day = period.size() == 10 && period[4] == '-' && period[7] == '-' &&
                      ParseInt(period.substr(0, 4), y) && ParseInt(period.substr(5, 2), m) &&
                      ParseInt(period.substr(8, 2), d);
  const bool is_month = period.size() == 7 && period[4] == '-' &&
                        ParseInt(period.substr(0, 4), y) && ParseInt(period.substr(5, 2), m);
  if ((!is_day && !is_month) || m < 1 || m > 12 || (is_day && (d < 1 || d > 31))) {
    return core::Error{"period: expected YYYY-MM or YYYY-MM-DD, got '" + std::string(period) + "'"};
  }
  if (is_day) {
    const int64_t days = core::DaysFromCivil({y, m, d});
    if (core::CivilFromDays(days) != core::CivilDate{y, m, d}) {
      return core::Error{"period: no such day '" + std::string(period) + "'"};
    }
    return std::vector<std::string>{DayLabel(days)};
  }
  std::vector<std::string> out;
  const int64_t first = core::DaysFromCivil({y, m, 1});
  const int64_t end =
      core::PeriodEnd(core::Period::kMonth, core::Instant::FromUnixSeconds(first * 86'400))
          .unix_micros() /
      (int64_t{86'400} * 1'000'000);
  for (int64_t day = first; day < end; ++day) out.push_back(DayLabel(day));
  return out;
}

void UsageMeter::Record(std::string_view account, std::string_view key_id, usage::Outcome outcome,
                        int64_t cost, core::Instant now, MeterTag tag) {
  // The day's label changes once a day: formatting it for every request showed in profiles.
  thread_local int64_t cached_day = INT64_MIN;
  thread_local std::string cached_label;
  const int64_t day = now.unix_micros() / (int64_t{86'400} * 1'000'000);
  if (day != cached_day) {
    cached_label = core::PeriodLabel(core::Period::kDay, now);
    cached_day = day;
  }
  const auto o = static_cast<size_t>(outcome);
  std::lock_guard lock(mu_);
  // With many keys, hashing three strings and walking a node-based table was three or four
  // cache misses per request; the tag's entry is one, its row another. Rows are never freed
  // (a dropped one is reused), so a cached pointer always points at a Row; its serial says
  // whether it is still the row it was.
  Cached* cached = nullptr;
  Row* row = nullptr;
  if (tag.key) {
    cached = &cache_[CacheIndex(tag)];
    if (cached->tag == tag && cached->row->serial == cached->serial) row = cached->row;
  }
  if (row == nullptr || row->day != day) {
    row = &Find(KeyView{cached_label, account, key_id}, day);
    if (cached) *cached = {tag, row, row->serial};
  }
  row->counts.requests[o] += 1;
  row->counts.cost[o] += cost;
}

UsageMeter::Row& UsageMeter::Find(const KeyView& view, int64_t day) {
  if (auto it = index_.find(view); it != index_.end()) return *it->second;
  Row* row;
  if (free_.empty()) {
    row = rows_.emplace_back(std::make_unique<Row>()).get();
  } else {
    row = free_.back();
    free_.pop_back();
  }
  row->day = day;
  row->key =
      usage::UsageKey{std::string(view.day), std::string(view.account), std::string(view.key_id)};
  index_.emplace(KeyView{row->key.day, row->key.account, row->key.key_id}, row);
  slice_rows_[rows_created_++ % slices_].push_back(row);
  return *row;
}

size_t UsageMeter::KeyHash::operator()(const KeyView& k) const {
  return usage::HashUsageKey(k.day, k.account, k.key_id);
}

void UsageMeter::Take(size_t slice, usage::UsageDeltas& out) {
  // A row counted since its last flush is sent and zeroed, not erased: the key's next request
  // finds it, where a new row would cost an allocation and its strings, once per key per
  // second with many keys. A row left at zero for a whole interval is erased, so the buffer
  // holds only the keys of the last two intervals.
  std::vector<Row*>& rows = slice_rows_[slice];
  for (size_t i = 0; i < rows.size();) {
    Row& row = *rows[i];
    if (std::all_of(row.counts.requests.begin(), row.counts.requests.end(),
                    [](int64_t n) { return n == 0; })) {
      index_.erase(KeyView{row.key.day, row.key.account, row.key.key_id});
      ++row.serial;
      free_.push_back(&row);
      rows[i] = rows.back();
      rows.pop_back();
      continue;
    }
    out.emplace_back(row.key, row.counts);
    row.counts = {};
    ++i;
  }
}

void UsageMeter::Flush(size_t slice) { Send(slice % slices_, slice % slices_ + 1); }

void UsageMeter::Flush() { Send(0, slices_); }

void UsageMeter::Send(size_t first, size_t last) {
  usage::UsageDeltas rows;
  {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (size_t slice = first; slice < last; ++slice) n += slice_rows_[slice].size();
    rows.reserve(n);
    for (size_t slice = first; slice < last; ++slice) Take(slice, rows);
  }
  // Called even with nothing new: a backend may have counts to send again.
  backend_.Add(rows);
}

void UsageMeter::Query(std::string_view period, std::string account,
                       std::function<void(core::Result<std::vector<UsageRecord>>)> done) {
  auto days = DaysOfPeriod(period);
  if (!days) return done(core::Error{days.error()});
  Flush();
  backend_.Read(
      std::move(days).value(), std::move(account),
      [period = std::string(period), done = std::move(done)](core::Result<usage::UsageRows> rows) {
        if (!rows) return done(core::Error{rows.error()});
        std::map<std::pair<std::string, std::string>, usage::UsageCounts> sums;
        for (const auto& [k, v] : *rows) sums[{k.account, k.key_id}].Add(v);
        std::vector<UsageRecord> out;
        for (const auto& [k, v] : sums) out.push_back({period, k.first, k.second, v});
        done(std::move(out));
      });
}

std::string UsageCsv(const std::vector<UsageRecord>& records) {
  std::string out = "period,account,key_id";
  for (const char* name : usage::kOutcomeNames) out += std::string(",") + name + "_requests";
  for (const char* name : usage::kOutcomeNames) out += std::string(",") + name + "_cost";
  out += "\n";
  auto field = [](const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  for (const UsageRecord& r : records) {
    out += field(r.period) + "," + field(r.account) + "," + field(r.key_id);
    for (int64_t n : r.counts.requests) out += "," + std::to_string(n);
    for (int64_t n : r.counts.cost) out += "," + std::to_string(n);
    out += "\n";
  }
  return out;
}

std::string UsageJson(const std::vector<UsageRecord>& records) {
  std::string out = "[";
  for (size_t i = 0; i < records.size(); ++i) {
    const UsageRecord& r = records[i];
    out += i ? "," : "";
    out += "{\"period\":\"" + Escape(r.period) + "\",\"account\":\"" + Escape(r.account) +
           "\",\"key_id\":\"" + Escape(r.key_id) + "\"";
    for (size_t o = 0; o < usage::kOutcomes; ++o) {
      out += ",\"" + std::string(usage::kOutcomeNames[o]) +
             "\":{\"requests\":" + std::to_string(r.counts.requests[o]) +
             ",\"cost\":" + std::to_string(r.counts.cost[o]) + "}";
    }
    out += "}";
  }
  return out + "]";
}

}  // namespace tollgate::usage
