// A real gRPC client calling ShouldRateLimit over loopback.
#include <tollgate/rls/rls_server.hpp>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <tollgate/store/memory_store.hpp>

#include "rls.grpc.pb.h"

namespace tollgate::rls {
namespace {

namespace pb = envoy::service::ratelimit::v3;

std::shared_ptr<const policy::Policy> TestPolicy() {
  auto c = config::ParseConfig(R"(
plans:
  free:
    limits:
      - {name: burst, capacity: 3, refill_per_second: 0.01}
keys:
  - {key: k-free, id: f, plan: free}
anonymous:
  limits: [{name: ip, capacity: 2, refill_per_second: 0.01}]
)");
  EXPECT_TRUE(c.ok()) << c.error();
  return *policy::Policy::Build(std::move(c).value());
}

class RlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<RlsServer>(
        RlsOptions{
            .listen = "127.0.0.1:0",
            .domains = {{.domain = "api", .key_entry = "api_key", .ip_entry = "remote_address"}}},
        engine_, [p = policy_] { return p; });
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.error();
    stub_ = pb::RateLimitService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(*port),
                                                              grpc::InsecureChannelCredentials()));
  }

  pb::RateLimitResponse Call(const std::string& domain, const std::string& entry_key,
                             const std::string& value, uint32_t hits = 0) {
    pb::RateLimitRequest req;
    req.set_domain(domain);
    req.set_hits_addend(hits);
    auto* e = req.add_descriptors()->add_entries();
    e->set_key(entry_key);
    e->set_value(value);
    pb::RateLimitResponse res;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    const grpc::Status s = stub_->ShouldRateLimit(&ctx, req, &res);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return res;
  }

  std::shared_ptr<const policy::Policy> policy_ = TestPolicy();
  store::MemoryStore memory_{store::MemoryStoreOptions{.max_keys = 1000, .shards = 2}};
  engine::Engine engine_{memory_};
  std::unique_ptr<RlsServer> server_;
  std::unique_ptr<pb::RateLimitService::Stub> stub_;
};

TEST_F(RlsTest, OkUntilTheBudgetThenOverLimitWithDurationUntilReset) {
  for (int i = 0; i < 3; ++i) {
    const auto res = Call("api", "api_key", "k-free");
    ASSERT_EQ(res.overall_code(), pb::RateLimitResponse::OK) << i;
    ASSERT_EQ(res.statuses_size(), 1);
    EXPECT_EQ(res.statuses(0).limit_remaining(), static_cast<uint32_t>(2 - i));
    EXPECT_EQ(res.statuses(0).current_limit().name(), "burst");
  }
  const auto res = Call("api", "api_key", "k-free");
  EXPECT_EQ(res.overall_code(), pb::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(0).code(), pb::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(0).duration_until_reset().seconds(), 100);  // one token at 0.01/s
  bool retry_after = false;
  for (const auto& h : res.response_headers_to_add())
    retry_after |= h.key() == "Retry-After" && h.value() == "100";
  EXPECT_TRUE(retry_after);
  EXPECT_EQ(server_->stats().over_limit.load(), 1u);
}

TEST_F(RlsTest, HitsAddendIsTheCost) {
  EXPECT_EQ(Call("api", "api_key", "k-free", 3).overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(Call("api", "api_key", "k-free", 1).overall_code(), pb::RateLimitResponse::OVER_LIMIT);
}

TEST_F(RlsTest, AddressesUseTheAnonymousLimits) {
  EXPECT_EQ(Call("api", "remote_address", "192.0.2.1").overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(Call("api", "remote_address", "192.0.2.1").overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(Call("api", "remote_address", "192.0.2.1").overall_code(),
            pb::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Call("api", "remote_address", "192.0.2.2").overall_code(), pb::RateLimitResponse::OK);
}

TEST_F(RlsTest, UnknownDomainIsOkAndCountedUnknownKeyIsDenied) {
  const auto res = Call("elsewhere", "api_key", "k-free");
  EXPECT_EQ(res.overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(server_->stats().unknown_domain.load(), 1u);
  EXPECT_EQ(Call("api", "api_key", "nope").overall_code(), pb::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Call("api", "other_entry", "x").overall_code(), pb::RateLimitResponse::OK);
}

}  // namespace
}  // namespace tollgate::rls
