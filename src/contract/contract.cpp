#include <tollgate/contract/contract.hpp>

#include <algorithm>

#include <tollgate/policy/policy.hpp>
#include <tollgate/util/text.hpp>

namespace tollgate::contract {

using util::AppendJsonEscaped;
using util::JsonEscape;

namespace {

bool Advertised(const store::Check& c) { return c.enforced && c.limit->PolicyQuota() > 0; }

}  // namespace

bool HeaderList::HasName(std::string_view name) const {
  for (const Name& n : names_) {
    if (n.size == name.size() &&
        util::EqualsIgnoreCase(std::string_view(text_).substr(n.at, n.size), name)) {
      return true;
    }
  }
  return false;
}

std::vector<std::pair<std::string, std::string>> HeaderList::Pairs() const {
  std::vector<std::pair<std::string, std::string>> out;
  std::string_view rest = text_;
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    const size_t colon = line.find(": ");
    out.emplace_back(line.substr(0, colon), line.substr(colon + 2));
    rest.remove_prefix(eol + 2);
  }
  return out;
}

int64_t SecondsUntilMoreQuota(const store::Check& check, const core::Decision& d) {
  if (!d.allowed && !d.retry_after.IsInfinite())
    return std::max<int64_t>(1, d.retry_after.CeilSeconds());
  if (const auto* b = std::get_if<core::TokenBucket>(&check.limit->impl())) {
    if (d.remaining >= d.limit) return 0;  // full: nothing more to come
    // `reset` is when the bucket is full; the next whole token comes that long before, less
    // the time of the tokens still missing after it.
    const __int128 after_next =
        static_cast<__int128>(d.limit - d.remaining - 1) * b->rate().per_micros / b->rate().tokens;
    return core::Duration::Micros(
               std::max<int64_t>(0, d.reset.micros() - static_cast<int64_t>(after_next)))
        .CeilSeconds();
  }
  return d.reset.CeilSeconds();  // a window or a period: its end
}

void AppendRateLimitHeaders(const config::HeadersConfig& sets, std::span<const store::Check> checks,
                            std::span<const core::Decision> decisions,
                            const engine::Verdict& verdict, HeaderList& list) {
  HeaderList::Writer out(list);
  const bool rejected = verdict.kind == engine::Verdict::Kind::kRejected;
  if (sets.ietf && std::any_of(checks.begin(), checks.end(), Advertised)) {
    // Written straight into the header block: this runs on every limited response.
    out.AddWith("RateLimit-Policy", [&](util::StringAppender& text) {
      std::string_view sep;
      for (const store::Check& c : checks) {
        if (!Advertised(c)) continue;
        text << sep << "\"" << c.name << "\";q=" << c.limit->PolicyQuota()
             << ";w=" << c.limit->PolicyWindowSeconds(verdict.now);
        sep = ", ";
      }
    });
    out.AddWith("RateLimit", [&](util::StringAppender& text) {
      std::string_view sep;
      for (size_t i = 0; i < checks.size(); ++i) {
        if (!Advertised(checks[i])) continue;
        text << sep << "\"" << checks[i].name << "\";r=" << decisions[i].remaining
             << ";t=" << SecondsUntilMoreQuota(checks[i], decisions[i]);
        sep = ", ";
      }
    });
  }
  if (verdict.primary >= 0 && (sets.ratelimit || sets.x_ratelimit)) {
    const auto i = static_cast<size_t>(verdict.primary);
    const core::Decision& d = decisions[i];
    if (Advertised(checks[i])) {
      // The same seconds as the policy's `t` (and, on a 429, Retry-After).
      const int64_t reset_s = SecondsUntilMoreQuota(checks[i], d);
      if (sets.ratelimit) {
        out.Add("RateLimit-Limit", d.limit);
        out.Add("RateLimit-Remaining", d.remaining);
        out.Add("RateLimit-Reset", reset_s);
      }
      if (sets.x_ratelimit) {
        out.Add("X-RateLimit-Limit", d.limit);
        out.Add("X-RateLimit-Remaining", d.remaining);
        out.Add("X-RateLimit-Reset", reset_s);
      }
    }
  }
  if ((rejected || verdict.kind == engine::Verdict::Kind::kUnavailable) &&
      !verdict.retry_after.IsInfinite()) {
    out.Add("Retry-After", std::max<int64_t>(1, verdict.retry_after.CeilSeconds()));
  }
}

void AppendRejectionFacts(std::string& out, std::span<const store::Check> checks,
                          std::span<const core::Decision> decisions, const engine::Verdict& verdict,
                          const AnswerOptions& options) {
  // What AppendRateLimitHeaders(), AppendRejectionBody() and Respond() read for a rejection,
  // reduced to what they write (whole seconds, not the microseconds they are rounded from).
  auto put = [&out](int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  const config::HeadersConfig& sets = *options.headers;
  put(int64_t{sets.ietf} | int64_t{sets.ratelimit} << 1 | int64_t{sets.x_ratelimit} << 2 |
      int64_t{options.code_header} << 3);
  put(options.deny_status);
  put(static_cast<int64_t>(verdict.code));
  put(verdict.primary);
  put(verdict.retry_after.IsInfinite() ? -1 : verdict.retry_after.CeilSeconds());
  for (size_t i = 0; i < checks.size(); ++i) {
    const store::Check& c = checks[i];
    const core::Decision& d = decisions[i];
    put(int64_t{Advertised(c)} | int64_t{c.enforced} << 1 | int64_t{d.allowed} << 2);
    put(c.limit->PolicyQuota());
    put(c.limit->PolicyWindowSeconds(verdict.now));
    put(d.limit);
    put(d.remaining);
    put(SecondsUntilMoreQuota(c, d));
    put(static_cast<int64_t>(c.name.size()));
    out.append(c.name);
  }
}

void AppendRejectionBody(std::string& out, std::span<const store::Check> checks,
                         std::span<const core::Decision> decisions, const engine::Verdict& verdict,
                         int status) {
  if (verdict.kind == engine::Verdict::Kind::kUnavailable) {
    out.append(
        "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
        "\"code\":\"limiter_unavailable\",\"detail\":\"the rate limiter cannot decide; retry "
        "later\"}");
    return;
  }
  std::string_view detail;
  switch (verdict.code) {
    case core::RejectCode::kCostExceedsCapacity:
      detail = "this request costs more than the limit's capacity and can never pass";
      break;
    case core::RejectCode::kQuotaExceeded:
      detail = "quota exhausted for this period";
      break;
    case core::RejectCode::kCeilingExceeded:
      detail = "usage ceiling reached for this period";
      break;
    default:
      detail = "too many requests";
      break;
  }
  util::StringAppender text(out);
  text << "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\","
          "\"title\":\"Too Many Requests\",\"status\":"
       << status << ",\"code\":\"" << core::RejectCodeName(verdict.code) << "\",\"detail\":\""
       << detail << "\",\"violated-policies\":[";
  std::string_view sep;
  for (size_t i = 0; i < checks.size(); ++i) {
    if (!checks[i].enforced || decisions[i].allowed) continue;
    text << sep << "\"";
    text.Flush();
    AppendJsonEscaped(out, checks[i].name);
    text << "\"";
    sep = ",";
  }
  text << "]";
  if (!verdict.retry_after.IsInfinite()) {
    text << ",\"retry_after\":" << std::max<int64_t>(1, verdict.retry_after.CeilSeconds());
  }
  text << "}";
}

std::string RejectionBody(std::span<const store::Check> checks,
                          std::span<const core::Decision> decisions, const engine::Verdict& verdict,
                          int status) {
  std::string body;
  AppendRejectionBody(body, checks, decisions, verdict, status);
  return body;
}

Answer Respond(const engine::Verdict& v, std::span<const store::Check> checks,
               std::span<const core::Decision> decisions, bool advertise,
               const AnswerOptions& options, HeaderList& headers, std::string& body) {
  using Kind = engine::Verdict::Kind;
  switch (v.kind) {
    case Kind::kAllowed:
      if (advertise) AppendRateLimitHeaders(*options.headers, checks, decisions, v, headers);
      return {};
    case Kind::kDegraded:
      return {};
    case Kind::kUnavailable: {
      AppendRateLimitHeaders(*options.headers, checks, decisions, v, headers);
      AppendRejectionBody(body, checks, decisions, v);
      return {.allowed = false,
              .status = options.deny_unavailable ? options.deny_status : 503,
              .code = "limiter_unavailable",
              .content_type = "application/problem+json"};
    }
    case Kind::kRejected: {
      AppendRateLimitHeaders(*options.headers, checks, decisions, v, headers);
      const std::string_view code = core::RejectCodeName(v.code);
      if (options.code_header) headers.Add("X-Tollgate-Code", code);
      AppendRejectionBody(body, checks, decisions, v, options.deny_status);
      return {.allowed = false,
              .status = options.deny_status,
              .code = code,
              .content_type = "application/problem+json"};
    }
  }
  return {};
}

Answer RespondInvalidKey(const engine::Verdict& v, const store::Check& check,
                         const core::Decision& decision, Credential presented,
                         const AnswerOptions& options, HeaderList& headers, std::string& body) {
  if (v.kind == engine::Verdict::Kind::kRejected) {
    headers.Add("Retry-After", std::max<int64_t>(1, v.retry_after.CeilSeconds()));
    AppendRejectionBody(body, {&check, 1}, {&decision, 1}, v, options.deny_status);
    return {.allowed = false,
            .status = options.deny_status,
            .code = core::RejectCodeName(v.code),
            .content_type = "application/problem+json"};
  }
  struct Refusal {
    int status;
    std::string_view code, detail;
  };
  static constexpr Refusal kRefusals[] = {
      {401, "missing_api_key", "an API key is required"},
      {401, "invalid_api_key", "the API key is not valid"},
      {403, "client_certificate_required", "a client certificate naming a key is required"},
      {403, "unknown_client_certificate", "the client certificate names no key"},
  };
  const Refusal& r = kRefusals[static_cast<size_t>(presented)];
  if (r.status == 401) headers.Add("WWW-Authenticate", "Bearer");
  body += ProblemBody(r.status, r.code, r.detail);
  return {.allowed = false, .status = r.status, .code = r.code, .content_type = kProblemJson};
}

std::string ProblemBody(int status, std::string_view code, std::string_view detail) {
  std::string_view title = "Error";
  static constexpr std::pair<int, std::string_view> kTitles[] = {
      {400, "Bad Request"},
      {401, "Unauthorized"},
      {403, "Forbidden"},
      {404, "Not Found"},
      {408, "Request Timeout"},
      {413, "Content Too Large"},
      {429, "Too Many Requests"},
      {431, "Request Header Fields Too Large"},
      {500, "Internal Server Error"},
      {502, "Bad Gateway"},
      {503, "Service Unavailable"},
      {504, "Gateway Timeout"},
  };
  for (const auto& [s, t] : kTitles) {
    if (s == status) title = t;
  }
  return "{\"type\":\"about:blank\",\"title\":\"" + std::string(title) +
         "\",\"status\":" + std::to_string(status) + ",\"code\":\"" + JsonEscape(code) +
         "\",\"detail\":\"" + JsonEscape(detail) + "\"}";
}

}  // namespace tollgate::contract
