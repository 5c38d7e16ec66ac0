// A decided request's metrics, and its 429: rendered once and sent again while it says the same.
#include "worker.hpp"

namespace tollgate::http {

void Worker::CountDecision(Exchange& ex, const policy::Plan& plan, std::span<const store::Check> cs,
                           std::span<const core::Decision> ds) {
  const engine::Verdict& v = ex.verdict;
  for (size_t i = 0; i < cs.size(); ++i) {
    const CheckResult result = ds[i].allowed    ? CheckResult::kAllowed
                               : cs[i].enforced ? CheckResult::kRejected
                                                : CheckResult::kShadowRejected;
    decision_counters.Decision(ex.generation, plan, cs[i].name, result)
        .fetch_add(1, std::memory_order_relaxed);
  }
  const bool enforced = ex.key ? ex.key->enforced : plan.enforced;
  decision_counters.Mode(ex.generation, plan, enforced).fetch_add(1, std::memory_order_relaxed);
  if (v.shadow_rejections > 0) {
    decision_counters.ShadowRejection(ex.generation, plan).fetch_add(1, std::memory_order_relaxed);
    ex.log.decision = contract::LogDecision::kShadowRejected;
  }
  if (v.local) {  // the store failed; this replica's share of each limit decided
    gw.metrics.Counter("tollgate_degraded_total").fetch_add(1, std::memory_order_relaxed);
    gw.LogStoreFailure(v.store_error);
    if (v.kind == engine::Verdict::Kind::kRejected) {
      decision_counters.Rejection(ex.generation, plan, v.code)
          .fetch_add(1, std::memory_order_relaxed);
    }
    ex.log.decision =
        v.allowed() ? contract::LogDecision::kLocalAllowed : contract::LogDecision::kLocalRejected;
    gw.metrics
        .Counter("tollgate_local_decisions_total",
                 v.allowed() ? "result=\"allowed\"" : "result=\"rejected\"")
        .fetch_add(1, std::memory_order_relaxed);
    return;
  }
  switch (v.kind) {
    case engine::Verdict::Kind::kAllowed:
      if (ex.log.decision == contract::LogDecision::kNone) {
        ex.log.decision = contract::LogDecision::kAllowed;
      }
      break;
    case engine::Verdict::Kind::kDegraded:
      ex.log.decision = contract::LogDecision::kDegraded;
      gw.metrics.Counter("tollgate_degraded_total").fetch_add(1, std::memory_order_relaxed);
      gw.LogStoreFailure(v.store_error);
      break;
    case engine::Verdict::Kind::kUnavailable:
      ex.log.decision = contract::LogDecision::kUnavailable;
      gw.metrics.Counter("tollgate_limiter_unavailable_total")
          .fetch_add(1, std::memory_order_relaxed);
      gw.LogStoreFailure(v.store_error);
      break;
    case engine::Verdict::Kind::kRejected:
      ex.log.decision = contract::LogDecision::kRejected;
      decision_counters.Rejection(ex.generation, plan, v.code)
          .fetch_add(1, std::memory_order_relaxed);
      break;
  }
}

Step Worker::Reject(Exchange& ex, Scratch& scratch, const contract::AnswerOptions& options) {
  // A client past its limit is told the same for a while, often many times a second: the same
  // numbers make the same bytes, so the answer is rendered when they change, and copied else.
  const std::span<const store::Check> cs{ex.checks.data(), ex.n_checks};
  const std::span<const core::Decision> ds{ex.decisions.data(), ex.n_checks};
  ex.reply_keep = KeepsAlive(ex);
  std::string& facts = scratch.body;  // free until a miss renders the body
  facts.clear();
  contract::AppendRejectionFacts(facts, cs, ds, ex.verdict, options);
  facts.push_back(static_cast<char>(ex.reply_keep));
  facts.push_back(static_cast<char>(ex.head->version));
  const RejectionCache::Response r = last_rejection.Get(facts, [&](std::string& response) {
    scratch.body.clear();
    scratch.rate_headers.Clear();
    const contract::Answer a =
        contract::Respond(ex.verdict, cs, ds, true, options, scratch.rate_headers, scratch.body);
    RenderResponse(response, static_cast<bhttp::status>(a.status), ex.reply_keep, ex.head->version,
                   a.content_type, scratch.rate_headers.Rendered(), scratch.body);
    return a.status;
  });
  scratch.out.assign(r.bytes);
  Finish(ex, scratch, r.status);
  return Step::kReply;
}

}  // namespace tollgate::http
