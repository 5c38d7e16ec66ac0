#include "access_line.hpp"

#include <algorithm>

#include <tollgate/contract/contract.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/json_escape.hpp>
#include <tollgate/util/query.hpp>
#include <tollgate/util/text.hpp>

namespace tollgate::http {

namespace {

using util::AppendDecimal;
using util::AppendJsonEscaped;

// The parameters of `query` named `param` (form-decoded, as the cost reads them), as sent and
// JSON-escaped, '&'-separated: what the access log keeps of a query.
void AppendCostParams(std::string& line, std::string_view query, std::string_view param) {
  if (param.empty()) return;
  std::string scratch;
  bool first = true;
  for (size_t begin = 0; begin <= query.size();) {
    const size_t amp = std::min(query.find('&', begin), query.size());
    const std::string_view raw = query.substr(begin, amp - begin);
    if (util::FormDecode(raw.substr(0, raw.find('=')), scratch) == param) {
      if (!first) line.push_back('&');
      AppendJsonEscaped(line, raw);
      first = false;
    }
    begin = amp + 1;
  }
}

// `,"name":"value"`, the value JSON-escaped.
void AppendText(std::string& line, std::string_view name, std::string_view value) {
  line.append(",\"").append(name).append("\":\"");
  AppendJsonEscaped(line, value);
  line.push_back('"');
}

// `,"name":value`.
void AppendNumber(std::string& line, std::string_view name, int64_t value) {
  line.append(",\"").append(name).append("\":");
  AppendDecimal(line, value);
}

}  // namespace

void RenderAccessLine(std::string& line, const RequestLog& log, const AccessLineFacts& facts) {
  line.assign("{\"ts\":\"");
  util::AppendIsoNow(line);
  line.push_back('"');
  AppendText(line, "method", facts.method);
  AppendText(line, "path", facts.path);
  line.append(",\"query\":\"");
  AppendCostParams(line, facts.query, log.cost_param);
  line.push_back('"');
  AppendNumber(line, "status", facts.status);
  AppendText(line, "client", facts.client);
  AppendText(line, "peer", facts.peer);
  AppendText(line, "request_id", facts.request_id);
  AppendText(line, "key_id", log.key_id);
  AppendText(line, "plan", log.plan);
  AppendText(line, "route", log.route);
  line.append(",\"decision\":\"").append(contract::NameOf(log.decision)).push_back('"');
  AppendNumber(line, "cost", log.cost);
  AppendNumber(line, "upstream_status", log.upstream_status);
  // Milliseconds to the microsecond, without printf's floating-point formatting.
  const int64_t us = facts.latency_us;
  const char frac[] = {'.', static_cast<char>('0' + us / 100 % 10),
                       static_cast<char>('0' + us / 10 % 10), static_cast<char>('0' + us % 10)};
  AppendNumber(line, "latency_ms", us / 1000);
  line.append(frac, sizeof frac);
  // When it was decided (Identify's clock), for `tollgate replay`'s order (issue 31).
  if (!log.route.empty()) AppendNumber(line, "decided_us", facts.decided_us);
  line.append("}\n");
}

}  // namespace tollgate::http
