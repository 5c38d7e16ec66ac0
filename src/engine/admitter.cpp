#include <tollgate/engine/admitter.hpp>

namespace tollgate::engine {

Admitted Admitter::Admit(const AdmitRequest& r, std::span<store::Check> checks,
                         Scopes& scopes) const {
  Admitted out;
  out.route = r.route;
  if (r.route) {
    out.keyed = LimitedByKey(*r.route, r.presented_key) || r.about_the_key || r.key_required;
  } else {
    out.keyed = r.presented_key;
  }
  const policy::Key* key = out.keyed ? r.key : nullptr;
  out.denied = Denied(pol_, r.runtime_deny, key, r.client);
  if (out.denied && !r.checks_when_denied) {
    out.key = key;
    out.plan = key ? key->plan : nullptr;
    return out;
  }
  if (r.route) {
    static_cast<Admission&>(out) = engine::Admit(pol_, *r.route, out.keyed, key, r.client, r.query,
                                                 r.fixed_cost, r.now, checks, scopes);
    return out;
  }
  // No route (an RLS domain): the identity's plan, no route limits, the given cost.
  out.key = key;
  out.plan = key ? key->plan : &pol_.anonymous();
  if (out.keyed && !key) {
    out.kind = Admission::Kind::kInvalidKey;  // the adapter answers (RLS: OVER_LIMIT)
    return out;
  }
  out.kind = Admission::Kind::kChecks;
  out.cost = r.fixed_cost.value_or(1);
  out.enforced = key ? key->enforced : out.plan->enforced;
  AssignScope(scopes.primary, *out.plan, key, r.client);
  if (out.plan->mixed_scopes) scopes.Fill(key, r.client);
  out.n = ChecksFor(*out.plan, key, out.cost, r.now, checks, &scopes);
  return out;
}

}  // namespace tollgate::engine
