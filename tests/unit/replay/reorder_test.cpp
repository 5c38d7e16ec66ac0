#include "replay/reorder.hpp"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::replay {
namespace {

std::string LineText(int64_t decided_us, const std::string& key_id) {
  return R"({"ts":"2026-11-29T21:59:56.123Z","method":"GET","path":"/v1/items","status":200,)"
         R"("client":"10.0.0.1","key_id":")" +
         key_id + R"x(","route":"(default)","decision":"allowed","decided_us":)x" +
         std::to_string(decided_us) + "}";
}

// Pushes lines decided at `decided` (in file order), releases them all; the numbers released.
std::vector<uint64_t> Order(const std::vector<int64_t>& decided) {
  ReorderBuffer buffer;
  std::string scratch;
  for (size_t i = 0; i < decided.size(); ++i) {
    const std::string text = LineText(decided[i], "k" + std::to_string(i));
    LogLine l;
    EXPECT_EQ(ParseLogLine(text, l, scratch), nullptr);
    buffer.Push(l, i + 1, text);
  }
  std::vector<uint64_t> out;
  buffer.Release(INT64_MAX, [&](const ReorderBuffer::Line& line) {
    EXPECT_TRUE(line.parsed);
    EXPECT_EQ(line.line.key_id, "k" + std::to_string(line.number - 1));  // kept, in the copy
    EXPECT_EQ(line.line.decided_us, line.decided_us);
    out.push_back(line.number);
  });
  EXPECT_EQ(buffer.size(), 0u);
  return out;
}

TEST(ReorderBuffer, ReleasesInDecisionOrderTiesInFileOrder) {
  EXPECT_EQ(Order({10, 20, 30}), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(Order({30, 10, 20}), (std::vector<uint64_t>{2, 3, 1}));
  EXPECT_EQ(Order({10, 10, 5, 10}), (std::vector<uint64_t>{3, 1, 2, 4}));
  // Far out of order (past the in-place scan): a long request decided before 200 others.
  std::vector<int64_t> decided;
  for (int i = 0; i < 200; ++i) decided.push_back(1000 + i);
  decided.push_back(1);
  decided.push_back(1000 + 50);  // ties with the 51st: after it
  const std::vector<uint64_t> order = Order(decided);
  ASSERT_EQ(order.size(), 202u);
  EXPECT_EQ(order[0], 201u);
  EXPECT_EQ(order[51], 51u);
  EXPECT_EQ(order[52], 202u);
  // Random orders against a sort.
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<int64_t> d;
    for (int i = 0; i < 500; ++i)
      d.push_back(1 + static_cast<int64_t>(rng() % (round % 2 ? 50 : 5000)));
    std::vector<uint64_t> expected(d.size());
    for (size_t i = 0; i < d.size(); ++i) expected[i] = i + 1;
    std::stable_sort(expected.begin(), expected.end(),
                     [&](uint64_t a, uint64_t b) { return d[a - 1] < d[b - 1]; });
    EXPECT_EQ(Order(d), expected) << round;
  }
}

TEST(ReorderBuffer, ReleasesOnlyUpToTheTimeGiven) {
  ReorderBuffer buffer;
  std::string scratch;
  for (int64_t d : {30, 10, 20}) {
    const std::string text = LineText(d, "k");
    LogLine l;
    ASSERT_EQ(ParseLogLine(text, l, scratch), nullptr);
    buffer.Push(l, static_cast<uint64_t>(d), text);
  }
  std::vector<int64_t> out;
  buffer.Release(20, [&](const ReorderBuffer::Line& line) { out.push_back(line.decided_us); });
  EXPECT_EQ(out, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(buffer.size(), 1u);
}

TEST(ReorderBuffer, ALineWithEscapesIsParsedAgain) {
  ReorderBuffer buffer;
  std::string scratch;
  const std::string text = LineText(5, "k\\u0041");  // decoded into the scratch buffer
  LogLine l;
  ASSERT_EQ(ParseLogLine(text, l, scratch), nullptr);
  ASSERT_EQ(l.key_id, "kA");
  buffer.Push(l, 1, text);
  scratch.assign(scratch.size(), 'x');  // the next parse overwrites it
  buffer.Release(INT64_MAX, [&](const ReorderBuffer::Line& line) {
    EXPECT_FALSE(line.parsed);
    EXPECT_EQ(line.Text(), text);
  });
}

}  // namespace
}  // namespace tollgate::replay
