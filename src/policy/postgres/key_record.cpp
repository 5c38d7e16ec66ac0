#include "policy/postgres/key_record.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <utility>

namespace json = boost::json;

namespace tollgate::policy::internal {
namespace {

std::optional<int64_t> ParseInt(const std::string& s) {
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// A JSON number as the decimal text the YAML loader reads (0.5, not 5E-1).
std::optional<std::string> ScalarText(const json::value& v) {
  char buf[64];
  switch (v.kind()) {
    case json::kind::string:
      return std::string(v.get_string());
    case json::kind::int64:
      return std::to_string(v.get_int64());
    case json::kind::uint64:
      return std::to_string(v.get_uint64());
    case json::kind::double_: {
      const auto r = std::to_chars(buf, buf + sizeof buf, v.get_double(), std::chars_format::fixed);
      if (r.ec != std::errc()) return std::nullopt;
      return std::string(buf, r.ptr);
    }
    case json::kind::bool_:
      return std::string(v.get_bool() ? "true" : "false");
    default:
      return std::nullopt;
  }
}

// The overrides column ({"burst": {"capacity": 5000, "expires": "2026-12-31"}}) checked against
// the key's plan by the YAML loader's own rules. Errors name the field under "overrides".
core::Result<std::vector<config::OverrideConfig>> ParseOverridesJson(
    const std::string& text, const config::PlanConfig& plan) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec) return core::Error{"overrides: not valid JSON: " + ec.message()};
  if (v.is_null()) return std::vector<config::OverrideConfig>{};
  if (!v.is_object())
    return core::Error{"overrides: must be a JSON object of limit name -> fields"};
  config::OverrideFields fields;
  for (const auto& [name, body] : v.get_object()) {
    const std::string path = "overrides." + std::string(name);
    if (!body.is_object()) return core::Error{path + ": must be a JSON object of fields"};
    auto& out = fields[std::string(name)];
    for (const auto& [field, value] : body.get_object()) {
      auto s = ScalarText(value);
      if (!s)
        return core::Error{path + "." + std::string(field) + ": must be a number or a string"};
      out[std::string(field)] = *s;
    }
  }
  auto parsed = config::ParseOverrides(fields, plan);
  if (!parsed) return core::Error{"overrides." + parsed.error()};
  return std::move(parsed).value();
}

// The key id, the digest and the fields that travel in HTTP headers. False: the row cannot be
// used (the reason is in `problems`).
bool CheckIdentity(const KeyRecord& r, config::KeyConfig& k, std::vector<RowProblem>& problems) {
  if (r.key_id.empty()) {
    problems.push_back({"key_id: must not be empty", "row skipped"});
    return false;
  }
  // These travel in the X-Tollgate-* fields of upstream requests: a CR/LF would inject lines.
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"key_id", &r.key_id},
        {"account_id", &r.account_id},
        {"plan", &r.plan}}) {
    if (!config::IsFieldSafe(*value)) {
      problems.push_back(
          {std::string(field) + ": must not contain control characters", "row skipped"});
      return false;
    }
  }
  k.id = r.key_id;
  // char(64) pads with spaces; digests compare in lowercase.
  k.sha256_hex = r.key_sha256;
  while (!k.sha256_hex.empty() && k.sha256_hex.back() == ' ') k.sha256_hex.pop_back();
  for (char& c : k.sha256_hex) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (k.sha256_hex.size() != 64 ||
      k.sha256_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    problems.push_back(
        {"key_sha256: must be 64 hex digits (the SHA-256 of the key)", "row skipped"});
    return false;
  }
  return true;
}

// rate_limit_per_minute and rate_limit_burst, kept only when KeyWindowLimit accepts them.
void CheckPerKeyColumns(const KeyRecord& r, config::KeyConfig& k,
                        std::vector<RowProblem>& problems) {
  const auto per_minute = ParseInt(r.rate_limit_per_minute);
  const auto burst = ParseInt(r.rate_limit_burst);
  if (!per_minute) {
    problems.push_back(
        {"rate_limit_per_minute: must be an integer, got '" + r.rate_limit_per_minute + "'",
         "key loaded without its per-key limit"});
  } else if (!burst) {
    problems.push_back({"rate_limit_burst: must be an integer, got '" + r.rate_limit_burst + "'",
                        "key loaded without its per-key limit"});
  } else if (auto limit = config::KeyWindowLimit(*per_minute, *burst); !limit) {
    problems.push_back({limit.error(), "key loaded without its per-key limit"});
  } else {
    k.rate_limit_per_minute = per_minute;
    k.rate_limit_burst = burst;
  }
}

}  // namespace

std::optional<config::KeyConfig> CheckRow(const KeyRecord& r,
                                          const std::vector<config::PlanConfig>& plans,
                                          std::vector<RowProblem>& problems) {
  config::KeyConfig k;
  if (!CheckIdentity(r, k, problems)) return std::nullopt;
  k.account = r.account_id.empty() ? r.key_id : r.account_id;  // as in the YAML keys
  k.plan = r.plan;
  const config::PlanConfig* plan = nullptr;
  for (const auto& p : plans)
    if (p.name == r.plan) plan = &p;
  if (!plan) {
    // DESIGN.md: an unknown plan gets the strictest plan (Policy::Build resolves it).
    problems.push_back({"plan: unknown plan '" + r.plan + "'",
                        "key loaded with the strictest plan, without per-key values"});
    return k;
  }
  CheckPerKeyColumns(r, k, problems);
  if (r.mode == "enforce") {
    k.mode = config::Mode::kEnforce;
  } else if (r.mode == "shadow") {
    k.mode = config::Mode::kShadow;
  } else if (!r.mode.empty()) {
    problems.push_back({"mode: must be enforce or shadow, got '" + r.mode + "'",
                        "key loaded with its plan's mode"});
  }
  if (!r.overrides.empty()) {
    auto overrides = ParseOverridesJson(r.overrides, *plan);
    if (overrides) {
      k.overrides = std::move(overrides).value();
    } else {
      problems.push_back({overrides.error(), "key loaded without its overrides"});
    }
  }
  return k;
}

std::string CompactJson(const std::string& text) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  return ec ? text : json::serialize(v);
}

json::object RecordJson(const KeyRecord& r) {
  json::object o;
  o["key_sha256"] = r.key_sha256;
  o["key_id"] = r.key_id;
  o["account_id"] = r.account_id;
  o["plan"] = r.plan;
  // Numbers as numbers when they are; anything else is kept as text to be refused again on load.
  for (auto [name, text] : {std::pair{"rate_limit_per_minute", &r.rate_limit_per_minute},
                            {"rate_limit_burst", &r.rate_limit_burst}}) {
    if (auto n = ParseInt(*text))
      o[name] = *n;
    else
      o[name] = *text;
  }
  if (r.mode.empty()) {
    o["mode"] = nullptr;
  } else {
    o["mode"] = r.mode;
  }
  if (r.overrides.empty()) {
    o["overrides"] = nullptr;
  } else {
    boost::system::error_code ec;
    json::value v = json::parse(r.overrides, ec);
    if (ec)
      o["overrides"] = r.overrides;
    else
      o["overrides"] = std::move(v);
  }
  return o;
}

KeyRecord RecordFromJson(const json::value& v) {
  KeyRecord r;
  if (!v.is_object()) return r;
  const json::object& o = v.get_object();
  auto text = [&](const char* name) -> std::string {
    const json::value* f = o.if_contains(name);
    if (!f || f->is_null()) return "";
    if (auto s = ScalarText(*f)) return *s;
    return json::serialize(*f);
  };
  r.key_sha256 = text("key_sha256");
  r.key_id = text("key_id");
  r.account_id = text("account_id");
  r.plan = text("plan");
  r.rate_limit_per_minute = text("rate_limit_per_minute");
  r.rate_limit_burst = text("rate_limit_burst");
  r.mode = text("mode");
  if (const json::value* ov = o.if_contains("overrides"); ov && !ov->is_null()) {
    r.overrides = json::serialize(*ov);
  }
  return r;
}

}  // namespace tollgate::policy::internal
