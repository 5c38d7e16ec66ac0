// envoyproxy/ratelimit descriptor files: loading, refusals naming file and field, and matching
// as upstream's README documents it.
#include <tollgate/config/envoy_rls.hpp>

#include <gtest/gtest.h>

namespace tollgate::config {
namespace {

core::Result<EnvoyRlsConfig> Parse(std::vector<std::pair<std::string, std::string>> files) {
  return ParseEnvoyRlsConfig(files);
}

EnvoyRlsConfig MustParse(const std::string& yaml) {
  auto c = Parse({{"a.yaml", yaml}});
  EXPECT_TRUE(c.ok()) << c.error();
  return std::move(c).value();
}

// The matched entry's stat key, or "-" when nothing limits the descriptor.
std::string MatchOf(const EnvoyRlsConfig& c, std::vector<std::pair<std::string, std::string>> e) {
  std::vector<std::pair<std::string_view, std::string_view>> views(e.begin(), e.end());
  const EnvoyMatch m = EnvoyRlsConfig::Match(c.domains.at(0), views);
  return m.descriptor ? m.stat_key : "-";
}

TEST(EnvoyRlsConfig, ReadsEveryFieldOfTheFormat) {
  const EnvoyRlsConfig c = MustParse(R"(
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5, name: marketing}
  - key: to_number
    shadow_mode: true
    detailed_metric: true
    rate_limit:
      unit: DAY
      requests_per_unit: 100
      replaces: [{name: marketing}]
  - key: ldap
    rate_limit: {unlimited: true}
  - key: tb
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket}
)");
  ASSERT_EQ(c.domains.size(), 1u);
  const EnvoyDescriptor& root = c.domains[0].root;
  ASSERT_EQ(root.descriptors.size(), 4u);
  const EnvoyRateLimit& nested = *root.descriptors[0].descriptors[0].rate_limit;
  EXPECT_EQ(nested.unit, EnvoyUnit::kDay);
  EXPECT_EQ(nested.requests_per_unit, 5u);
  EXPECT_EQ(nested.name, "marketing");
  EXPECT_EQ(root.descriptors[0].descriptors[0].stat_key, "message_type_marketing.to_number");
  const EnvoyDescriptor& to_number = root.descriptors[1];
  EXPECT_TRUE(to_number.shadow_mode);
  EXPECT_TRUE(to_number.detailed_metric);
  EXPECT_EQ(to_number.rate_limit->replaces, std::vector<std::string>{"marketing"});
  EXPECT_TRUE(root.descriptors[2].rate_limit->unlimited);
  EXPECT_FALSE(root.descriptors[2].rate_limit->limit.has_value());
  EXPECT_EQ(root.descriptors[3].rate_limit->limit->algorithm(), core::Algorithm::kTokenBucket);
  EXPECT_EQ(root.descriptors[1].rate_limit->limit->algorithm(), core::Algorithm::kFixedWindow);
}

TEST(EnvoyRlsConfig, UnitsAreUpstreamsDividers) {
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kSecond), 1);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kWeek), 604'800);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kMonth), 30 * 86'400);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kYear), 365 * 86'400);
  EXPECT_EQ(EnvoyUnitFromNumber(4), EnvoyUnit::kDay);
  EXPECT_EQ(EnvoyUnitFromNumber(0), std::nullopt);
  EXPECT_EQ(EnvoyUnitFromNumber(8), std::nullopt);
}

TEST(EnvoyRlsConfig, KeyAndValueBeforeAPrefixBeforeTheKeyAlone) {  // README examples 3 and 9
  const EnvoyRlsConfig c = MustParse(R"(
domain: d
descriptors:
  - {key: remote_address, rate_limit: {unit: second, requests_per_unit: 10}}
  - {key: remote_address, value: 50.0.0.5, rate_limit: {unit: second, requests_per_unit: 0}}
  - {key: remote_address, value: "10.*", rate_limit: {unit: second, requests_per_unit: 3}}
)");
  EXPECT_EQ(MatchOf(c, {{"remote_address", "50.0.0.5"}}), "remote_address_50.0.0.5");
  EXPECT_EQ(MatchOf(c, {{"remote_address", "10.1.2.3"}}), "remote_address_10.*");
  EXPECT_EQ(MatchOf(c, {{"remote_address", "50.0.0.1"}}), "remote_address");
  EXPECT_EQ(MatchOf(c, {{"other", "x"}}), "-");
}

TEST(EnvoyRlsConfig, MatchesOnlyAtTheRequestsDepth) {  // README example 4
  const EnvoyRlsConfig flat = MustParse(R"(
domain: example4
descriptors:
  - {key: key, value: value, rate_limit: {requests_per_unit: 300, unit: second}}
)");
  EXPECT_EQ(MatchOf(flat, {{"key", "value"}, {"subkey", "subvalue"}}), "-");
  EXPECT_EQ(MatchOf(flat, {{"key", "value"}}), "key_value");
  const EnvoyRlsConfig nested = MustParse(R"(
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - {key: subkey, rate_limit: {requests_per_unit: 300, unit: second}}
)");
  EXPECT_EQ(MatchOf(nested, {{"key", "value"}, {"subkey", "subvalue"}}), "key_value.subkey");
  EXPECT_EQ(MatchOf(nested, {{"key", "value"}}), "-");  // a placeholder has no limit
}

TEST(EnvoyRlsConfig, DetailedMetricNamesTheRequestsValues) {  // README example 8
  const EnvoyRlsConfig c = MustParse(R"(
domain: example8
descriptors:
  - {key: key1, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: key1, value: value1, rate_limit: {unit: minute, requests_per_unit: 20}}
)");
  EXPECT_EQ(MatchOf(c, {{"key1", "unspecified_value"}}), "key1_unspecified_value");
  EXPECT_EQ(MatchOf(c, {{"key1", "value1"}}), "key1_value1");
}

TEST(EnvoyRlsConfig, RefusalsNameTheFileAndTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"descriptors: []", "a.yaml: domain: required"},
      {"domain: ''", "a.yaml: domain: must not be empty"},
      {"domain: d\ndescriptors: [{value: v}]", "a.yaml: descriptors[0].key: required"},
      {"domain: d\ndescriptors: [{key: ''}]", "a.yaml: descriptors[0].key: must not be empty"},
      {"domain: d\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]",
       "a.yaml: descriptors[0].rate_limit.unit: must be second, minute, hour, day, week, month or "
       "year, got 'fortnight'"},
      {"domain: d\ndescriptors: [{key: k, rate_limit: {unit: second}}]",
       "a.yaml: descriptors[0].rate_limit.requests_per_unit: required"},
      {"domain: d\ndescriptors: [{key: k, rate_limit: {requests_per_unit: 1}}]",
       "a.yaml: descriptors[0].rate_limit.unit: required (or unlimited: true)"},
      {"domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: -1}}]",
       "a.yaml: descriptors[0].rate_limit.requests_per_unit: must be >= 0, got -1"},
      {"domain: d\ndescriptors: [{key: k, rate_limit: {unlimited: true, unit: second}}]",
       "a.yaml: descriptors[0].rate_limit.unit: must not be given with unlimited: true"},
      {"domain: d\ndescriptors: [{key: k, ratelimit: {}}]",
       "a.yaml: descriptors[0].ratelimit: unknown field"},
      {"domain: d\ndescriptors: [{key: k, value: v}, {key: k, value: v}]",
       "a.yaml: descriptors[1]: key 'k' value 'v' appears twice in this list"},
      {"domain: d\ndescriptors: [{key: k, descriptors: [{key: x}, {key: x}]}]",
       "a.yaml: descriptors[0].descriptors[1]: key 'x' appears twice in this list"},
      {"domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, "
       "algorithm: quota}}]",
       "a.yaml: descriptors[0].rate_limit.algorithm: must be fixed_window, token_bucket, "
       "sliding_window_counter or sliding_window_log, got 'quota'"},
      // Issue 31: yaml-cpp kept the first of two equal keys.
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
       "requests_per_unit: 1, unit: hour}",
       "a.yaml: line 4: descriptors[0].rate_limit.unit: given twice (first at line 4): YAML "
       "keeps one of them, so remove the other"},
      {"domain: d\ndomain: e\n", "a.yaml: line 2: domain: given twice (first at line 1)"},
      {"domain: [", "a.yaml: not YAML"},
      {"", "a.yaml: the file is empty"},
  };
  for (const auto& [yaml, error] : cases) {
    auto c = Parse({{"a.yaml", yaml}});
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_EQ(c.error().substr(0, error.size()), error) << yaml << "\n" << c.error();
  }
}

TEST(EnvoyRlsConfig, RefusesACycleOfReplaces) {
  auto c = Parse({{"a.yaml", R"(
domain: d
descriptors:
  - {key: a, rate_limit: {name: A, unit: second, requests_per_unit: 1, replaces: [{name: B}]}}
  - {key: b, rate_limit: {name: B, unit: second, requests_per_unit: 1, replaces: [{name: C}]}}
  - {key: c, rate_limit: {name: C, unit: second, requests_per_unit: 1, replaces: [{name: A}]}}
)"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), "a.yaml: replaces: a cycle: A -> B -> C -> A");
  auto self = Parse({{"a.yaml", R"(
domain: d
descriptors:
  - {key: a, rate_limit: {name: A, unit: second, requests_per_unit: 1, replaces: [{name: A}]}}
)"}});
  ASSERT_FALSE(self.ok());
  EXPECT_EQ(self.error(), "a.yaml: replaces: a cycle: A -> A");
  // A chain is fine.
  EXPECT_TRUE(Parse({{"a.yaml", R"(
domain: d
descriptors:
  - {key: a, rate_limit: {name: A, unit: second, requests_per_unit: 1, replaces: [{name: B}]}}
  - {key: b, rate_limit: {name: B, unit: second, requests_per_unit: 1, replaces: [{name: C}]}}
)"}}).ok());
}

TEST(EnvoyRlsConfig, RefusesADomainInTwoFiles) {
  auto c = Parse({{"one.yaml", "domain: d\n"}, {"two.yaml", "domain: d\n"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), "two.yaml: domain: 'd' is already defined in one.yaml");
}

TEST(EnvoyRlsConfig, LoadsADirectoryOfYamlFilesInNameOrder) {
  const std::string dir = ::testing::TempDir() + "envoy_rls_dir";
  std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  auto write = [&](const std::string& name, const std::string& text) {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  write("b.yaml", "domain: b\n");
  write("a.yml", "domain: a\n");
  write(".hidden.yaml", "domain: [\n");  // dot files are not read
  write("notes.txt", "not a config\n");
  auto c = LoadEnvoyRlsConfig(dir);
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->domains.size(), 2u);
  EXPECT_EQ(c->domains[0].domain, "a");
  EXPECT_EQ(c->domains[1].domain, "b");
  auto one = LoadEnvoyRlsConfig(dir + "/b.yaml");
  ASSERT_TRUE(one.ok()) << one.error();
  EXPECT_EQ(one->domains.size(), 1u);
  EXPECT_FALSE(LoadEnvoyRlsConfig(dir + "/missing.yaml").ok());
  std::system(("rm -rf " + dir).c_str());
}

TEST(EnvoyRlsConfig, TheShippedExampleLoadsAndMatchesAsItsCommentsSay) {
  auto c = LoadEnvoyRlsConfig(TOLLGATE_SOURCE_DIR "/examples/ratelimit/config");
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->domains.size(), 1u);
  EXPECT_EQ(c->domains[0].domain, "edge");
  EXPECT_EQ(MatchOf(*c, {{"remote_address", "192.0.2.66"}}), "remote_address_192.0.2.66");
  EXPECT_EQ(MatchOf(*c, {{"remote_address", "192.0.2.1"}}), "remote_address");
  EXPECT_EQ(MatchOf(*c, {{"api_key", "internal-ci"}}), "api_key_internal-*");
  EXPECT_EQ(MatchOf(*c, {{"api_key", "sk-123"}}), "api_key");
  EXPECT_EQ(MatchOf(*c, {{"generic_key", "checkout"}, {"user_id", "u1"}}),
            "generic_key_checkout.user_id");
}

}  // namespace
}  // namespace tollgate::config
