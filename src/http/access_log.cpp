#include "access_log.hpp"

#include <tollgate/util/clock.hpp>
#include <tollgate/util/json_escape.hpp>

namespace tollgate::http {

void Log::Error(const std::string& line) {
  std::string stamped = "{\"ts\":\"";
  AppendIsoNow(stamped);
  if (line.size() > 2 && line.front() == '{' && line.back() == '}') {
    stamped.append("\",").append(line, 1);
  } else {
    stamped.append("\",\"msg\":\"");
    util::AppendJsonEscaped(stamped, line);
    stamped.append("\"}");
  }
  std::lock_guard lock(mu_);
  std::fprintf(stderr, "%s\n", stamped.c_str());
  std::fflush(stderr);
}

}  // namespace tollgate::http
