#include <tollgate/util/clock.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace tollgate::util {

// Appends the time now as 2026-11-29T21:59:56.123Z. The part to the second is formatted once a
// second per thread: every access-log line starts with it.
void AppendIsoNow(std::string& out) {
  const auto now = std::chrono::system_clock::now();
  const auto t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  thread_local std::time_t formatted = -1;
  thread_local char seconds[72];  // 2026-11-29T21:59:56; room for any int the fields may hold
  thread_local size_t seconds_size = 0;
  if (t != formatted) {
    std::tm tm;
    gmtime_r(&t, &tm);
    const int n =
        std::snprintf(seconds, sizeof seconds, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                      tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    seconds_size = static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof seconds) - 1));
    formatted = t;
  }
  const char millis[] = {'.', static_cast<char>('0' + ms / 100),
                         static_cast<char>('0' + ms / 10 % 10), static_cast<char>('0' + ms % 10),
                         'Z'};
  out.append(seconds, seconds_size).append(millis, sizeof millis);
}

}  // namespace tollgate::util
