// Domains of rls.domains: each descriptor names an API key or a client address, and is one
// request of that identity against its plan (all-or-nothing per descriptor).
#include <tollgate/contract/contract.hpp>
#include <tollgate/util/clock.hpp>

#include "rls/call.hpp"

namespace tollgate::rls::internal {
namespace {

class Mapped final : public Call {
 public:
  Mapped(const ServerContext& server, const RlsDomain& domain,
         std::shared_ptr<const policy::Policy> policy, const pb::RateLimitRequest& request,
         pb::RateLimitResponse& response, Done done)
      : Call(server, request, response, std::move(done)),
        domain_(domain),
        policy_(std::move(policy)) {}

 private:
  struct Decided {
    Group* group;
    int status;  // index into response statuses
    bool enforced;
    engine::Scopes scopes;  // the checks' scopes point into it
  };

  std::string Prepare() override {
    const policy::Policy& pol = *policy_;
    const core::Instant now = util::SystemClock::Instance().Now();
    for (const pb::RateLimitDescriptor& desc : request_.descriptors()) {
      pb::RateLimitResponse::DescriptorStatus* status = response_.add_statuses();
      status->set_code(pb::RateLimitResponse::OK);
      const policy::Key* key = nullptr;
      const policy::Plan* plan = nullptr;
      std::string address;
      bool unknown_key = false;
      for (const auto& e : desc.entries()) {
        if (!domain_.key_entry.empty() && e.key() == domain_.key_entry) {
          key = pol.FindByKey(policy::BearerToken(e.value()).value_or(e.value()));
          unknown_key = key == nullptr;
          if (key) plan = key->plan;
        } else if (!domain_.ip_entry.empty() && e.key() == domain_.ip_entry && !plan) {
          address = pol.ClientAddress(e.value(), "");
          plan = &pol.anonymous();
        }
      }
      if (unknown_key) {
        server_.stats.unknown_key.fetch_add(1, std::memory_order_relaxed);
        status->set_code(pb::RateLimitResponse::OVER_LIMIT);
        continue;
      }
      if (!plan || plan->limits.empty()) continue;
      Decided& d = decided_.emplace_back();
      d.group = &AddGroup();
      d.status = response_.statuses_size() - 1;
      d.enforced = key ? key->enforced : plan->enforced;
      engine::AssignScope(d.scopes.primary, *plan, key, address);
      if (plan->mixed_scopes) d.scopes.Fill(key, address);
      Group& g = *d.group;
      g.n = engine::ChecksFor(*plan, key, CostOf(request_, desc), now, g.checks, &d.scopes);
      // Envoy holds nothing for us: a smoothing limit rejects instead of delaying.
      for (size_t i = 0; i < g.n; ++i) g.checks[i].may_delay = false;
      g.scope = d.scopes.primary;
    }
    return {};
  }

  void Answer() override {
    const policy::Policy& pol = *policy_;
    // One set of header fields, however many descriptors: the first rejecting one's, else the
    // first's.
    contract::HeaderList chosen;
    bool chosen_rejects = false;
    for (Decided& d : decided_) {
      const Group& g = *d.group;
      const engine::Verdict& v = g.verdict;
      pb::RateLimitResponse::DescriptorStatus* status = response_.mutable_statuses(d.status);
      // The one answer mapping (contract/): a denial is OVER_LIMIT; its headers are Envoy's to
      // add.
      contract::HeaderList headers;
      std::string body;  // RLS has no body
      const contract::AnswerOptions answer{.headers = &pol.config().headers};
      const std::span<const store::Check> cs{g.checks.data(), g.n};
      const std::span<const core::Decision> ds{g.decisions.data(), g.n};
      const bool rejects = !contract::Respond(v, cs, ds, d.enforced, answer, headers, body).allowed;
      if (rejects) status->set_code(pb::RateLimitResponse::OVER_LIMIT);
      if (&d == &decided_.front() || (rejects && !chosen_rejects)) {
        chosen = std::move(headers);
        chosen_rejects = rejects;
      }
      if (v.primary >= 0 && d.enforced) {
        const auto p = static_cast<size_t>(v.primary);
        auto* limit = status->mutable_current_limit();
        limit->set_name(std::string(g.checks[p].name));
        DescribeLimit(*g.checks[p].limit, v.now, limit);
        const core::Decision& dec = g.decisions[p];
        status->set_limit_remaining(
            static_cast<uint32_t>(std::clamp<int64_t>(dec.remaining, 0, UINT32_MAX)));
        const core::Duration until =
            !dec.allowed && !dec.retry_after.IsInfinite() ? dec.retry_after : dec.reset;
        status->mutable_duration_until_reset()->set_seconds(until.CeilSeconds());
      }
    }
    AddResponseHeaders(chosen, response_);
  }

  const RlsDomain& domain_;
  std::shared_ptr<const policy::Policy> policy_;
  std::deque<Decided> decided_;
};

}  // namespace

std::unique_ptr<Call> MappedCall(const ServerContext& server, const RlsDomain& domain,
                                 std::shared_ptr<const policy::Policy> policy,
                                 const pb::RateLimitRequest& request,
                                 pb::RateLimitResponse& response, Done done) {
  return std::make_unique<Mapped>(server, domain, std::move(policy), request, response,
                                  std::move(done));
}

}  // namespace tollgate::rls::internal
