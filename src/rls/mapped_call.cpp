// Domains of rls.domains: each descriptor names an API key or a client address, and is one
// request of that identity against its plan (all-or-nothing per descriptor).
#include <tollgate/contract/contract.hpp>
#include <tollgate/engine/admitter.hpp>
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
    const engine::Admitter admitter(pol);
    const std::shared_ptr<const policy::DenyList> runtime_deny =
        server_.options.runtime_deny ? server_.options.runtime_deny() : nullptr;
    for (const pb::RateLimitDescriptor& desc : request_.descriptors()) {
      pb::RateLimitResponse::DescriptorStatus* status = response_.add_statuses();
      status->set_code(pb::RateLimitResponse::OK);
      // The identity it names: an API key (its plan), else a client address (anonymous
      // limits); the address is the client's either way (the deny list, per-address limits).
      const policy::Key* key = nullptr;
      bool presented_key = false;
      std::string address;
      for (const auto& e : desc.entries()) {
        if (!domain_.key_entry.empty() && e.key() == domain_.key_entry && !presented_key) {
          key = pol.FindByKey(policy::BearerToken(e.value()).value_or(e.value()));
          presented_key = true;
        } else if (!domain_.ip_entry.empty() && e.key() == domain_.ip_entry && address.empty()) {
          address = pol.ClientAddress(e.value(), "");
        }
      }
      if (!presented_key && address.empty()) continue;  // no mapped entry
      Decided& d = decided_.emplace_back();
      Group& g = *(d.group = &AddGroup());
      const engine::Admitted a = admitter.Admit({.presented_key = presented_key,
                                                 .key = key,
                                                 .client = address,
                                                 .fixed_cost = CostOf(request_, desc),
                                                 .now = now,
                                                 .runtime_deny = runtime_deny.get()},
                                                g.checks, d.scopes);
      // Refused (the gateway's 403 or 401): OVER_LIMIT, nothing consumed.
      const bool refused = a.denied || a.kind == engine::Admission::Kind::kInvalidKey;
      if (refused) {
        (a.denied ? server_.stats.denied : server_.stats.unknown_key)
            .fetch_add(1, std::memory_order_relaxed);
        status->set_code(pb::RateLimitResponse::OVER_LIMIT);
      }
      if (refused || a.n == 0) {
        DropLastGroup();
        decided_.pop_back();
        continue;
      }
      d.status = response_.statuses_size() - 1;
      d.enforced = a.enforced;
      g.n = a.n;
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
