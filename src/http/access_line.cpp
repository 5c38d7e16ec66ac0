#include "access_line.hpp"

#include <algorithm>

#include <tollgate/contract/contract.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/query.hpp>
#include <tollgate/util/text.hpp>

namespace tollgate::http {

namespace {

using contract::AppendJsonEscaped;
using util::AppendDecimal;

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

}  // namespace

void RenderAccessLine(std::string& line, const RequestLog& log, const AccessLineFacts& facts) {
  line.assign("{\"ts\":\"");
  util::AppendIsoNow(line);
  line.append("\",\"method\":\"");
  AppendJsonEscaped(line, facts.method);
  line.append("\",\"path\":\"");
  AppendJsonEscaped(line, facts.path);
  line.append("\",\"query\":\"");
  AppendCostParams(line, facts.query, log.cost_param);
  line.append("\",\"status\":");
  AppendDecimal(line, facts.status);
  line.append(",\"client\":\"");
  AppendJsonEscaped(line, facts.client);
  line.append("\",\"peer\":\"");
  AppendJsonEscaped(line, facts.peer);
  line.append("\",\"request_id\":\"");
  AppendJsonEscaped(line, facts.request_id);
  line.append("\",\"key_id\":\"");
  AppendJsonEscaped(line, log.key_id);
  line.append("\",\"plan\":\"");
  AppendJsonEscaped(line, log.plan);
  line.append("\",\"route\":\"");
  AppendJsonEscaped(line, log.route);
  line.append("\",\"decision\":\"").append(contract::NameOf(log.decision)).append("\",\"cost\":");
  AppendDecimal(line, log.cost);
  line.append(",\"upstream_status\":");
  AppendDecimal(line, log.upstream_status);
  // Milliseconds to the microsecond, without printf's floating-point formatting.
  const int64_t us = facts.latency_us;
  const char frac[] = {'.', static_cast<char>('0' + us / 100 % 10),
                       static_cast<char>('0' + us / 10 % 10), static_cast<char>('0' + us % 10)};
  line.append(",\"latency_ms\":");
  AppendDecimal(line, us / 1000);
  line.append(frac, sizeof frac);
  // When it was decided (Identify's clock), for `tollgate replay`'s order (issue 31).
  if (!log.route.empty()) {
    line.append(",\"decided_us\":");
    AppendDecimal(line, facts.decided_us);
  }
  line.append("}\n");
}

}  // namespace tollgate::http
