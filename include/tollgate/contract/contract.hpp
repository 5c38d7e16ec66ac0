// The response contract of DESIGN.md: rate-limit headers and error bodies. No HTTP library
// here: headers are name/value pairs the server copies into its response.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tollgate/config/config.hpp>
#include <tollgate/core/decision.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/store/store.hpp>
#include <tollgate/util/json_escape.hpp>
#include <tollgate/util/text.hpp>

namespace tollgate::contract {

// Response headers, kept as an HTTP/1.1 header block ("Name: value\r\n" per header) that the
// gateway writes as it is; Pairs() gives them to callers that speak something else (gRPC, the
// embedding API). Names and values are ours, never client bytes.
class HeaderList {
 public:
  // Adds headers through one buffer (see util::StringAppender); they are in the list once the
  // writer is gone.
  class Writer {
   public:
    explicit Writer(HeaderList& list) : list_(list), out_(list.text_) {}

    // Inlined, so that a literal name is copied without a call.
    [[gnu::always_inline]] void Add(std::string_view name, std::string_view value) {
      Start(name) << value << "\r\n";
    }
    [[gnu::always_inline]] void Add(std::string_view name, int64_t value) {
      Start(name) << value << "\r\n";
    }
    // Adds a header whose value `write(util::StringAppender&)` writes in place.
    template <typename Write>
    void AddWith(std::string_view name, Write&& write) {
      write(Start(name));
      out_ << "\r\n";
    }

   private:
    [[gnu::always_inline]] util::StringAppender& Start(std::string_view name) {
      list_.names_.push_back(
          {static_cast<uint32_t>(out_.size()), static_cast<uint32_t>(name.size())});
      list_.sizes_ |= name.size() < 64 ? uint64_t{1} << name.size() : 0;
      return out_ << name << ": ";
    }

    HeaderList& list_;
    util::StringAppender out_;
  };

  void Add(std::string_view name, std::string_view value) { Writer(*this).Add(name, value); }
  void Add(std::string_view name, int64_t value) { Writer(*this).Add(name, value); }
  const std::string& Rendered() const { return text_; }
  bool empty() const { return text_.empty(); }
  void Clear() {  // keeps the capacity
    text_.clear();
    names_.clear();
    sizes_ = 0;
  }
  // Whether a header of this name (any case) is in the list. Inline up to the size check: it
  // runs for every field of every proxied response, which mostly has a size none of ours has.
  bool Has(std::string_view name) const {
    if (name.size() < 64 && !(sizes_ >> name.size() & 1)) return false;
    return HasName(name);
  }
  std::vector<std::pair<std::string, std::string>> Pairs() const;

 private:
  struct Name {
    uint32_t at;
    uint32_t size;
  };
  bool HasName(std::string_view name) const;

  std::string text_;
  std::vector<Name> names_;  // where each header's name is in text_
  uint64_t sizes_ = 0;       // bit n set: a name of size n (below 64) is in names_
};

// The `t` of draft-ietf-httpapi-ratelimit-headers-10 for one check: the seconds until the policy
// makes more quota available. A rejecting check: when the request could pass (its Retry-After);
// a token bucket: its next whole token (0 when full); a window or a quota: its end. The
// RateLimit-Reset fields say the same for the headline policy.
int64_t SecondsUntilMoreQuota(const store::Check& check, const core::Decision& decision);

// Appends the configured header sets for the enforced checks (shadow checks are never
// advertised; unlimited meters have nothing to advertise):
//   RateLimit-Policy: "burst";q=20;w=40, "daily";q=1000;w=86400
//   RateLimit: "burst";r=7;t=26, "daily";r=990;t=3600
//   RateLimit-Limit / -Remaining / -Reset and X-RateLimit-* for the verdict's primary check
//   (the one that limited, else the one with the smallest remaining). Reset is delta seconds,
//   the policy's `t` (SecondsUntilMoreQuota).
//   Retry-After on a rejection, unless the request can never pass.
void AppendRateLimitHeaders(const config::HeadersConfig& sets, std::span<const store::Check> checks,
                            std::span<const core::Decision> decisions,
                            const engine::Verdict& verdict, HeaderList& out);

// application/problem+json body of a 429 (or 503 limiter_unavailable). `status` is the HTTP
// status it is sent with (the decision service may deny with 403 for nginx auth_request).
void AppendRejectionBody(std::string& out, std::span<const store::Check> checks,
                         std::span<const core::Decision> decisions, const engine::Verdict& verdict,
                         int status = 429);
std::string RejectionBody(std::span<const store::Check> checks,
                          std::span<const core::Decision> decisions, const engine::Verdict& verdict,
                          int status = 429);

// How an adapter answers. The gateway and libtollgate use the defaults; the decision listener
// denies with decision.deny_status (nginx auth_request needs 403) and adds the code in a header.
struct AnswerOptions {
  const config::HeadersConfig* headers = nullptr;  // which rate-limit header sets. REQUIRES: set
  int deny_status = 429;          // a rejection, and a store failure on a fail-closed route (below)
  bool deny_unavailable = false;  // a store failure answers deny_status instead of 503
  bool code_header = false;       // X-Tollgate-Code on a rejection (nginx drops auth bodies)
};

// What to send for a decided request: the status, the body's code and type. The headers and
// body themselves are appended to the caller's HeaderList and string (no allocation of ours).
struct Answer {
  bool allowed = true;  // forward the request (also when degraded: fail open)
  int status = 200;
  std::string_view code;  // "" when allowed
  std::string_view content_type = "application/json";
};

// The one decision -> response mapping of DESIGN.md, for every adapter (gateway, decision
// listener, Envoy RLS, libtollgate):
//   allowed      200; rate-limit headers when `advertise` (the plan is enforced)
//   degraded     200 (fail open); no headers: nothing was decided
//   rejected     deny_status, problem+json with the violated policies, the headers and
//                Retry-After (none when the request can never pass)
//   unavailable  503 limiter_unavailable (or deny_status), Retry-After
Answer Respond(const engine::Verdict& verdict, std::span<const store::Check> checks,
               std::span<const core::Decision> decisions, bool advertise,
               const AnswerOptions& options, HeaderList& headers, std::string& body);

// Every value the headers and body of a rejection (Respond() with a rejected verdict) are made
// of, appended to `out` as bytes: two rejections with equal facts get the same answer, so an
// adapter may render one and send it again while the facts stay the same.
void AppendRejectionFacts(std::string& out, std::span<const store::Check> checks,
                          std::span<const core::Decision> decisions, const engine::Verdict& verdict,
                          const AnswerOptions& options);

// What a request without a valid key presented: no key, a key that names nobody, and on a
// `client_cert` route no verified client certificate, or one that names no key.
enum class Credential { kNoKey, kUnknownKey, kNoCertificate, kUnknownCertificate };

// A request without a valid key on a keyed route: 401 (missing_api_key or invalid_api_key, with
// WWW-Authenticate: Bearer), 403 on a client_cert route (client_certificate_required or
// unknown_client_certificate: no HTTP authentication scheme asks for a certificate), or, once
// the client address has sent too many invalid keys (the verdict of identity.invalid_key_limit,
// `check` and `decision`), deny_status with Retry-After.
Answer RespondInvalidKey(const engine::Verdict& verdict, const store::Check& check,
                         const core::Decision& decision, Credential presented,
                         const AnswerOptions& options, HeaderList& headers, std::string& body);

// Every error tollgate writes itself is an RFC 9457 problem: this content type, and
// {"type":"about:blank","title":<the status's reason>,"status":N,"code":<stable code>,
//  "detail":<text>} (the 429's body, AppendRejectionBody, adds its own members).
inline constexpr std::string_view kProblemJson = "application/problem+json";
std::string ProblemBody(int status, std::string_view code, std::string_view detail);

}  // namespace tollgate::contract
