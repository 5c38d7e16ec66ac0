// RESP, the Redis protocol, in the client's direction: requests as arrays of bulk strings.
// Replies are parsed by hiredis (connection.hpp).
#pragma once

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <tollgate/util/text.hpp>
#include <vector>

namespace tollgate::store::redis {

// ASKING, sent before a command that follows an ASK redirect.
inline constexpr std::string_view kAsking = "*1\r\n$6\r\nASKING\r\n";

// One bulk string: "$<length>\r\n<bytes>\r\n". Decisions are encoded through a StringAppender:
// the string sees one append per buffer-full, not five per argument. Inline: a decision's
// request is a dozen of them.
inline void AppendBulk(util::StringAppender& out, std::string_view a) {
  out << "$" << a.size() << "\r\n" << a << "\r\n";
}
// An integer argument, in decimal.
inline void AppendBulk(util::StringAppender& out, int64_t v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  AppendBulk(out, std::string_view(buf, static_cast<size_t>(end - buf)));
}
inline void AppendBulk(std::string& out, std::string_view a) {
  util::StringAppender text(out);
  AppendBulk(text, a);
}

// A whole request: "*<count>\r\n" and each of `args` (convertible to std::string_view) as a
// bulk string.
template <class Args>
void AppendRequest(std::string& out, const Args& args) {
  out += '*';
  util::AppendDecimal(out, static_cast<int64_t>(args.size()));
  out += "\r\n";
  for (const auto& a : args) AppendBulk(out, std::string_view(a));
}
void AppendCommand(std::string& out, const std::vector<std::string>& args);
void AppendCommand(std::string& out, std::initializer_list<std::string_view> args);

}  // namespace tollgate::store::redis
