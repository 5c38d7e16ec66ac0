// One request's line of the JSON access log (server.access_log), rendered apart from the worker
// that writes it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "access_log.hpp"

namespace tollgate::http {

// What the line says of a request besides its RequestLog. Views, valid for the call.
struct AccessLineFacts {
  std::string_view method;
  std::string_view path;   // the canonical one
  std::string_view query;  // whole: only the parameters named RequestLog::cost_param are written
  int status = 0;
  std::string_view client;  // the client address limits name
  std::string_view peer;    // the connection's
  std::string_view request_id;
  int64_t latency_us = 0;  // from the request's start to now
  int64_t decided_us = 0;  // when it was decided (unix microseconds); written for routed requests
};

// The line into `line` (replacing what it held): one JSON object with the time now first and a
// newline after it. Every string is JSON-escaped: paths and addresses are client bytes.
void RenderAccessLine(std::string& line, const RequestLog& log, const AccessLineFacts& facts);

}  // namespace tollgate::http
