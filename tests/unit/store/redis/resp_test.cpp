#include "store/redis/resp.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tollgate::store::redis {
namespace {

TEST(Resp, ACommandIsAnArrayOfBulkStrings) {
  std::string out;
  AppendCommand(out, {"SET", "key", "value"});
  EXPECT_EQ(out, "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n");
}

TEST(Resp, BothOverloadsEncodeAlike) {
  std::string from_list;
  std::string from_vector;
  AppendCommand(from_list, {"HINCRBY", "k", "f", "-3"});
  AppendCommand(from_vector, std::vector<std::string>{"HINCRBY", "k", "f", "-3"});
  EXPECT_EQ(from_list, from_vector);
}

TEST(Resp, CommandsAppendToWhatIsThere) {
  std::string out = "prefix";
  AppendCommand(out, {"PING"});
  AppendCommand(out, {"ECHO", "x"});
  EXPECT_EQ(out, "prefix*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n");
}

// Bulk strings are binary-safe: the length counts every byte, CR, LF and NUL included.
TEST(Resp, ArgumentsAreBinarySafe) {
  std::string out;
  AppendCommand(out, {"SET", std::string_view("a\r\nb\0c", 6), ""});
  EXPECT_EQ(out, std::string("*3\r\n$3\r\nSET\r\n$6\r\na\r\nb\0c\r\n$0\r\n\r\n", 31));
}

// Longer than the appender's buffer (1 KiB): the bytes still arrive whole and in order.
TEST(Resp, LongArgumentsPassThroughTheAppender) {
  const std::string big(5000, 'x');
  std::string out;
  AppendCommand(out, {"SET", "k", big});
  EXPECT_EQ(out, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5000\r\n" + big + "\r\n");
}

TEST(Resp, IntegersGoInDecimal) {
  std::string out;
  {
    util::StringAppender text(out);
    AppendBulk(text, int64_t{-42});
    AppendBulk(text, int64_t{0});
    AppendBulk(text, INT64_MAX);
  }
  EXPECT_EQ(out, "$3\r\n-42\r\n$1\r\n0\r\n$19\r\n9223372036854775807\r\n");
}

TEST(Resp, AskingIsTheAskingCommand) {
  std::string out;
  AppendCommand(out, {"ASKING"});
  EXPECT_EQ(out, kAsking);
}

}  // namespace
}  // namespace tollgate::store::redis
