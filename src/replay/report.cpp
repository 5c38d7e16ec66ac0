// The replay's report as a human table, JSON or CSV (docs/operations.md, "Replay").
#include <algorithm>
#include <cstdio>

#include <tollgate/replay/replay.hpp>
#include <tollgate/util/json_escape.hpp>

namespace tollgate::replay {
namespace {

std::string ShareText(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", share);
  return buf;
}

std::string Percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f%%", share * 100);
  return buf;
}

struct Outcome {
  const char* name;
  uint64_t count;
};

std::vector<Outcome> Outcomes(const Report& r) {
  return {{"not_routed", r.not_routed},     {"unlimited", r.unlimited},
          {"invalid_key", r.invalid_key},   {"blocked", r.blocked},
          {"invalid_cost", r.invalid_cost}, {"unknown_identity", r.unknown_identity},
          {"clock_held", r.clock_held}};
}

void TableRow(std::string& out, std::string_view name, const Counts& c) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %-32.*s %10llu %10llu %10llu %9s %10llu %10llu  %s\n",
                static_cast<int>(std::min<size_t>(name.size(), 200)), name.data(),
                static_cast<unsigned long long>(c.requests),
                static_cast<unsigned long long>(c.rejected),
                static_cast<unsigned long long>(c.shadow_rejected), Percent(c.Share()).c_str(),
                static_cast<unsigned long long>(c.newly_rejected),
                static_cast<unsigned long long>(c.newly_admitted),
                c.first_rejection_ts.empty() ? "-" : c.first_rejection_ts.c_str());
  out += buf;
}

void TableSection(std::string& out, const char* title, const std::vector<Group>& groups) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "\n%s\n  %-32s %10s %10s %10s %9s %10s %10s  %s\n", title, "name",
                "requests", "rejected", "shadow", "share", "newly_rej", "newly_adm",
                "first rejection");
  out += buf;
  for (const Group& g : groups) TableRow(out, g.name, g.counts);
}

std::string Table(const Report& r, std::optional<double> max_share) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "lines: %llu (malformed: %llu)\n",
                static_cast<unsigned long long>(r.lines),
                static_cast<unsigned long long>(r.malformed));
  out += buf;
  if (r.lines == 0) out += "the log is empty\n";
  for (const Malformed& m : r.first_malformed) {
    std::snprintf(buf, sizeof buf, "  malformed line %llu: %s\n",
                  static_cast<unsigned long long>(m.line), m.reason.c_str());
    out += buf;
  }
  if (r.malformed > r.first_malformed.size()) out += "  ...\n";
  TableSection(out, "total", {{"all", r.total}});
  for (const Outcome& o : Outcomes(r)) {
    std::snprintf(buf, sizeof buf, "  %s: %llu\n", o.name,
                  static_cast<unsigned long long>(o.count));
    out += buf;
  }
  TableSection(out, "plans", r.plans);
  TableSection(out, "routes", r.routes);
  TableSection(out, "top keys", r.top_keys);
  if (max_share) {
    const bool fail = ExceedsShare(r, *max_share);
    out += "\nreject share " + Percent(r.total.Share()) + (fail ? " > " : " <= ") +
           Percent(*max_share) + ": " + (fail ? "FAIL" : "ok") + "\n";
  }
  return out;
}

void JsonString(std::string& out, std::string_view s) {
  out += '"';
  util::AppendJsonEscaped(out, s);
  out += '"';
}

void JsonCounts(std::string& out, const Counts& c) {
  out += "{\"requests\":" + std::to_string(c.requests) +
         ",\"rejected\":" + std::to_string(c.rejected) +
         ",\"shadow_rejected\":" + std::to_string(c.shadow_rejected) +
         ",\"would_reject\":" + std::to_string(c.WouldReject()) +
         ",\"share\":" + ShareText(c.Share()) +
         ",\"newly_rejected\":" + std::to_string(c.newly_rejected) +
         ",\"newly_admitted\":" + std::to_string(c.newly_admitted) + ",\"first_rejection\":";
  if (c.first_rejection_line == 0) {
    out += "null";
  } else {
    out += "{\"ts\":";
    JsonString(out, c.first_rejection_ts);
    out += ",\"line\":" + std::to_string(c.first_rejection_line) + "}";
  }
  out += "}";
}

void JsonGroups(std::string& out, const char* name, const std::vector<Group>& groups) {
  out += ",\"";
  out += name;
  out += "\":[";
  for (const Group& g : groups) {
    if (&g != groups.data()) out += ',';
    out += "{\"name\":";
    JsonString(out, g.name);
    out += ",\"counts\":";
    JsonCounts(out, g.counts);
    out += "}";
  }
  out += "]";
}

std::string Json(const Report& r, std::optional<double> max_share) {
  std::string out = "{\"lines\":" + std::to_string(r.lines) +
                    ",\"empty\":" + (r.lines == 0 ? "true" : "false") +
                    ",\"malformed\":{\"count\":" + std::to_string(r.malformed) + ",\"first\":[";
  for (const Malformed& m : r.first_malformed) {
    if (&m != r.first_malformed.data()) out += ',';
    out += "{\"line\":" + std::to_string(m.line) + ",\"reason\":";
    JsonString(out, m.reason);
    out += "}";
  }
  out += "]},\"total\":";
  JsonCounts(out, r.total);
  out += ",\"outcomes\":{";
  const std::vector<Outcome> outcomes = Outcomes(r);
  for (const Outcome& o : outcomes) {
    if (&o != outcomes.data()) out += ',';
    out += std::string("\"") + o.name + "\":" + std::to_string(o.count);
  }
  out += "}";
  JsonGroups(out, "plans", r.plans);
  JsonGroups(out, "routes", r.routes);
  JsonGroups(out, "top_keys", r.top_keys);
  if (max_share) {
    out += ",\"gate\":{\"max_reject_share\":" + ShareText(*max_share) +
           ",\"exceeded\":" + (ExceedsShare(r, *max_share) ? "true" : "false") + "}";
  }
  out += "}\n";
  return out;
}

// RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled.
void CsvField(std::string& out, std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) {
    out += s;
    return;
  }
  out += '"';
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

void CsvRow(std::string& out, std::string_view section, std::string_view name, const Counts& c,
            std::string_view note) {
  CsvField(out, section);
  out += ',';
  CsvField(out, name);
  out += ',' + std::to_string(c.requests) + ',' + std::to_string(c.rejected) + ',' +
         std::to_string(c.shadow_rejected) + ',' + ShareText(c.Share()) + ',' +
         std::to_string(c.newly_rejected) + ',' + std::to_string(c.newly_admitted) + ',';
  CsvField(out, c.first_rejection_ts);
  out += ',';
  if (c.first_rejection_line > 0) out += std::to_string(c.first_rejection_line);
  out += ',';
  CsvField(out, note);
  out += "\r\n";
}

std::string Csv(const Report& r, std::optional<double> max_share) {
  std::string out =
      "section,name,requests,rejected,shadow_rejected,share,newly_rejected,newly_admitted,"
      "first_rejection_ts,first_rejection_line,note\r\n";
  std::string note =
      "lines " + std::to_string(r.lines) + ", malformed " + std::to_string(r.malformed);
  if (r.lines == 0) note = "the log is empty";
  if (max_share) {
    note += std::string(ExceedsShare(r, *max_share) ? "; share above " : "; share within ") +
            ShareText(*max_share);
  }
  CsvRow(out, "total", "all", r.total, note);
  for (const Outcome& o : Outcomes(r)) {
    CsvRow(out, "outcome", o.name, Counts{.requests = o.count}, "");
  }
  for (const Group& g : r.plans) CsvRow(out, "plan", g.name, g.counts, "");
  for (const Group& g : r.routes) CsvRow(out, "route", g.name, g.counts, "");
  for (const Group& g : r.top_keys) CsvRow(out, "key", g.name, g.counts, "");
  for (const Malformed& m : r.first_malformed) {
    CsvRow(out, "malformed", std::to_string(m.line), Counts{}, m.reason);
  }
  return out;
}

}  // namespace

std::string Render(const Report& report, Format format, std::optional<double> max_share) {
  switch (format) {
    case Format::kJson:
      return Json(report, max_share);
    case Format::kCsv:
      return Csv(report, max_share);
    case Format::kTable:
      break;
  }
  return Table(report, max_share);
}

}  // namespace tollgate::replay
