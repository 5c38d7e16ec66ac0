// A real gRPC client calling ShouldRateLimit over loopback.
#include <tollgate/rls/rls_server.hpp>

#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
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
    port_ = *port;
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
  int port_ = 0;
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

// A client that knows no .proto: the request is encoded by hand from the field numbers Envoy
// publishes (envoy/service/ratelimit/v3/rls.proto, envoy/extensions/common/ratelimit/v3/
// ratelimit.proto, envoy/config/core/v3/base.proto), and the response decoded the same way. A
// wrong field number in our rls.proto fails here even though our own generated client agrees
// with it.
namespace wire {

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}
std::string Bytes(int field, const std::string& bytes) {
  return Varint(static_cast<uint64_t>(field) << 3 | 2) + Varint(bytes.size()) + bytes;
}
std::string Number(int field, uint64_t v) {
  return Varint(static_cast<uint64_t>(field) << 3) + Varint(v);
}

// Field number -> every value of it: varints as numbers, length-delimited fields as bytes.
struct Message {
  std::multimap<int, uint64_t> numbers;
  std::multimap<int, std::string> bytes;
};
Message Decode(const std::string& data) {
  Message m;
  size_t i = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0; i < data.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(data[i++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  while (i < data.size()) {
    const uint64_t key = varint();
    const int field = static_cast<int>(key >> 3);
    if ((key & 7) == 0) {
      m.numbers.emplace(field, varint());
    } else if ((key & 7) == 2) {
      const size_t n = varint();
      m.bytes.emplace(field, data.substr(i, n));
      i += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << (key & 7) << " for field " << field;
      break;
    }
  }
  return m;
}

}  // namespace wire

TEST_F(RlsTest, AHandEncodedRequestGetsTheAnswerEnvoyReads) {
  grpc::GenericStub stub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                             grpc::InsecureChannelCredentials()));
  auto call = [&](uint64_t request_hits, std::optional<uint64_t> descriptor_hits) {
    // RateLimitRequest{domain = 1, descriptors = 2, hits_addend = 3}; RateLimitDescriptor{
    // entries = 1, limit = 2, hits_addend = 3 (UInt64Value{value = 1})}; Entry{key = 1, value = 2}.
    std::string descriptor = wire::Bytes(1, wire::Bytes(1, "api_key") + wire::Bytes(2, "k-free"));
    if (descriptor_hits) descriptor += wire::Bytes(3, wire::Number(1, *descriptor_hits));
    const std::string request =
        wire::Bytes(1, "api") + wire::Bytes(2, descriptor) + wire::Number(3, request_hits);
    grpc::Slice slice(request);
    grpc::ByteBuffer in(&slice, 1), out;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", {}, &in,
                   &out, [&done](grpc::Status s) { done.set_value(std::move(s)); });
    const grpc::Status status = done.get_future().get();
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(out.Dump(&slices).ok());
    std::string bytes;
    for (const auto& sl : slices)
      bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    return wire::Decode(bytes);
  };
  // RateLimitResponse{overall_code = 1, statuses = 2, response_headers_to_add = 3};
  // DescriptorStatus{code = 1, current_limit = 2, limit_remaining = 3, duration_until_reset = 4};
  // RateLimit{requests_per_unit = 1, unit = 2, name = 3}; HeaderValue{key = 1, value = 2}.
  const wire::Message ok = call(2, std::nullopt);  // 3 -> 1
  EXPECT_EQ(ok.numbers.find(1)->second, 1u);       // OK
  ASSERT_EQ(ok.bytes.count(2), 1u);
  const wire::Message status = wire::Decode(ok.bytes.find(2)->second);
  EXPECT_EQ(status.numbers.find(1)->second, 1u);  // OK
  EXPECT_EQ(status.numbers.find(3)->second, 1u);  // limit_remaining
  const wire::Message limit = wire::Decode(status.bytes.find(2)->second);
  EXPECT_EQ(limit.bytes.find(3)->second, "burst");
  EXPECT_EQ(limit.numbers.find(2)->second, 3u);  // HOUR: 0.01/s is 36 an hour
  EXPECT_EQ(limit.numbers.find(1)->second, 36u);
  bool remaining_header = false;
  for (auto [it, end] = ok.bytes.equal_range(3); it != end; ++it) {
    const wire::Message h = wire::Decode(it->second);
    remaining_header |=
        h.bytes.find(1)->second == "RateLimit-Remaining" && h.bytes.find(2)->second == "1";
  }
  EXPECT_TRUE(remaining_header);
  // The descriptor's own hits_addend (3) overrides the request's (1): over the limit, with
  // duration_until_reset (a Duration{seconds = 1}) of two tokens at 0.01/s.
  const wire::Message over = call(1, 3);
  EXPECT_EQ(over.numbers.find(1)->second, 2u);  // OVER_LIMIT
  const wire::Message refused = wire::Decode(over.bytes.find(2)->second);
  EXPECT_EQ(refused.numbers.find(1)->second, 2u);
  const wire::Message until = wire::Decode(refused.bytes.find(4)->second);
  EXPECT_EQ(until.numbers.find(1)->second, 200u);
  // Hostile costs: the largest UInt64Value can never pass and consumes nothing; the one token
  // left is still there for a request of cost 1.
  for (uint64_t huge : {uint64_t{1} << 32, ~uint64_t{0}}) {
    EXPECT_EQ(call(1, huge).numbers.find(1)->second, 2u) << huge;
  }
  const wire::Message last = call(1, std::nullopt);
  EXPECT_EQ(last.numbers.find(1)->second, 1u);
  EXPECT_EQ(wire::Decode(last.bytes.find(2)->second).numbers.count(3), 0u);  // 0 left: omitted
}

// Descriptor files on a store that cannot span scopes (Redis Cluster): each descriptor is
// decided alone, as upstream does, so a call rejected by one still consumes the others; on one
// that can, the call is all-or-nothing.
std::vector<uint32_t> RemainingAfterARejectedCall(bool store_spans_scopes) {
  const std::string dir = ::testing::TempDir() + "rls_envoy_" + std::to_string(store_spans_scopes);
  std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  {
    std::ofstream f(dir + "/d.yaml");
    f << "domain: d\ndescriptors:\n"
         "  - {key: a, rate_limit: {unit: day, requests_per_unit: 1}}\n"
         "  - {key: b, rate_limit: {unit: day, requests_per_unit: 5}}\n";
  }
  store::MemoryStore memory{store::MemoryStoreOptions{.max_keys = 1000, .shards = 2}};
  engine::Engine engine{memory};
  RlsServer server(
      RlsOptions{
          .listen = "127.0.0.1:0", .envoy_config = dir, .store_spans_scopes = store_spans_scopes},
      engine, [] { return TestPolicy(); });
  auto port = server.Start();
  EXPECT_TRUE(port.ok()) << port.error();
  auto stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*port), grpc::InsecureChannelCredentials()));
  std::vector<uint32_t> remaining;
  for (int i = 0; i < 2; ++i) {
    pb::RateLimitRequest req;
    req.set_domain("d");
    for (const char* key : {"a", "b"}) {
      auto* e = req.add_descriptors()->add_entries();
      e->set_key(key);
      e->set_value("x");
    }
    pb::RateLimitResponse res;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    EXPECT_TRUE(stub->ShouldRateLimit(&ctx, req, &res).ok());
    EXPECT_EQ(res.overall_code(),
              i == 0 ? pb::RateLimitResponse::OK : pb::RateLimitResponse::OVER_LIMIT);
    remaining.push_back(res.statuses(1).limit_remaining());
  }
  std::system(("rm -rf " + dir).c_str());
  return remaining;
}

TEST(RlsEnvoyConfig, ACallRejectedByOneDescriptorConsumesNoneOfTheOthers) {
  EXPECT_EQ(RemainingAfterARejectedCall(true), (std::vector<uint32_t>{4, 4}));
}

TEST(RlsEnvoyConfig, OnAStoreThatCannotSpanScopesEachDescriptorIsDecidedAlone) {
  EXPECT_EQ(RemainingAfterARejectedCall(false), (std::vector<uint32_t>{4, 3}));
}

// The deny list (the configuration's and the admin API's runtime list) refuses the keys,
// accounts and addresses of `domains` as the gateway's 403 does: OVER_LIMIT, counted, and
// nothing consumed (issue 32, part 1).
TEST(RlsDeny, DeniedKeysAccountsAndAddressesAreOverLimitAndConsumeNothing) {
  auto c = config::ParseConfig(R"(
plans:
  team:
    limits:
      - {name: burst, capacity: 3, refill_per_second: 0.01}
keys:
  - {key: k-team, id: t, account: acme, plan: team}
  - {key: k-denied, id: d, account: other, plan: team}
  - {key: k-account, id: a, account: banned, plan: team}
  - {key: k-runtime, id: r, account: acme, plan: team}
anonymous:
  limits: [{name: ip, capacity: 3, refill_per_second: 0.01}]
deny:
  keys: [d]
  accounts: [banned]
  addresses: [198.51.100.7, 203.0.113.0/24, "2001:db8::/32"]
)");
  ASSERT_TRUE(c.ok()) << c.error();
  auto built = policy::Policy::Build(std::move(c).value());
  ASSERT_TRUE(built.ok()) << built.error();
  std::shared_ptr<const policy::Policy> pol = *built;
  auto runtime = std::make_shared<policy::DenyList>();
  ASSERT_FALSE(runtime->Add(policy::DenyList::Kind::kKey, "r").has_value());
  ASSERT_FALSE(runtime->Add(policy::DenyList::Kind::kAddress, "192.0.2.99").has_value());
  store::MemoryStore memory{store::MemoryStoreOptions{.max_keys = 1000, .shards = 2}};
  engine::Engine engine{memory};
  RlsServer server(
      RlsOptions{.listen = "127.0.0.1:0",
                 .domains = {{.domain = "api", .key_entry = "api_key", .ip_entry = "addr"}},
                 .runtime_deny = [&runtime] { return runtime; }},
      engine, [pol] { return pol; });
  auto port = server.Start();
  ASSERT_TRUE(port.ok()) << port.error();
  auto stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*port), grpc::InsecureChannelCredentials()));
  auto call = [&](const std::vector<std::pair<std::string, std::string>>& entries) {
    pb::RateLimitRequest req;
    req.set_domain("api");
    auto* d = req.add_descriptors();
    for (const auto& [k, v] : entries) {
      auto* e = d->add_entries();
      e->set_key(k);
      e->set_value(v);
    }
    pb::RateLimitResponse res;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    EXPECT_TRUE(stub->ShouldRateLimit(&ctx, req, &res).ok());
    return res.overall_code();
  };
  const struct {
    std::vector<std::pair<std::string, std::string>> entries;
    const char* why;
  } denied[] = {
      {{{"api_key", "k-denied"}}, "key by id (configuration)"},
      {{{"api_key", "Bearer k-denied"}}, "key by id, as a bearer token"},
      {{{"api_key", "k-account"}}, "key of a denied account"},
      {{{"api_key", "k-runtime"}}, "key by id (runtime list)"},
      {{{"addr", "198.51.100.7"}}, "address (configuration)"},
      {{{"addr", "203.0.113.200"}}, "address in a denied IPv4 range"},
      {{{"addr", "2001:db8::1"}}, "address in a denied IPv6 range"},
      {{{"addr", "2001:DB8:0::1"}}, "the same IPv6 address, another spelling"},
      {{{"addr", "192.0.2.99"}}, "address (runtime list)"},
      {{{"api_key", "k-team"}, {"addr", "198.51.100.7"}}, "a good key from a denied address"},
      {{{"addr", "198.51.100.7"}, {"api_key", "k-team"}}, "the same, entries the other way"},
  };
  for (const auto& d : denied) {
    EXPECT_EQ(call(d.entries), pb::RateLimitResponse::OVER_LIMIT) << d.why;
  }
  EXPECT_EQ(server.stats().denied.load(), std::size(denied));
  EXPECT_EQ(server.stats().unknown_key.load(), 0u);
  // Nothing was consumed: the good key and a good address have their whole budget.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(call({{"api_key", "k-team"}, {"addr", "192.0.2.1"}}), pb::RateLimitResponse::OK);
    EXPECT_EQ(call({{"addr", "192.0.2.2"}}), pb::RateLimitResponse::OK);
  }
  EXPECT_EQ(call({{"api_key", "k-team"}}), pb::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(call({{"addr", "192.0.2.2"}}), pb::RateLimitResponse::OVER_LIMIT);
  // Lifted from the runtime list (calls are one after another): admitted again.
  runtime = nullptr;
  EXPECT_EQ(call({{"api_key", "k-runtime"}}), pb::RateLimitResponse::OK);
  EXPECT_EQ(call({{"addr", "192.0.2.99"}}), pb::RateLimitResponse::OK);
  server.Shutdown();
}

}  // namespace
}  // namespace tollgate::rls
