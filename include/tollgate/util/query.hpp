// Reading the parameters of a query string ("pages=5&q=a+b"): the one parser behind route cost
// and the admin endpoints, so that what is costed is what the upstream's framework will read.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace tollgate::util {

// Form-decodes `in` as application/x-www-form-urlencoded does (what Express, Rails, Django and
// PHP read a query as): '+' is a space and %XX the byte XX (either hex case); a '%' not followed
// by two hex digits is kept as it is. Returns `in` itself when there is nothing to decode (no
// '+' or '%'), else a view of `scratch`, which then holds the result.
std::string_view FormDecode(std::string_view in, std::string& scratch);

// Calls fn(name, value, has_value) for each '&'-separated parameter of `query` (without its
// '?'), in order, repeated names included: name and value form-decoded (FormDecode), has_value
// false for a parameter without '=' ("?verbose": value empty). Empty parameters ("a=1&&b=2")
// are skipped. The views are valid during the call only. If fn returns bool, false stops the
// walk. Allocates only for a parameter that needs decoding and does not fit in a short string.
// `separators`: the bytes that end a parameter ("&;" for the parsers that split at ';' too:
// Rack before 3, Python's before 3.9.2).
template <class Fn>
void ForEachQueryParam(std::string_view query, Fn&& fn, std::string_view separators = "&") {
  std::string name_scratch, value_scratch;
  for (;;) {
    const size_t amp =
        separators.size() == 1 ? query.find(separators[0]) : query.find_first_of(separators);
    const std::string_view param = query.substr(0, amp);
    if (!param.empty()) {
      const size_t eq = param.find('=');
      const bool has_value = eq != std::string_view::npos;
      const std::string_view name = FormDecode(param.substr(0, eq), name_scratch);
      const std::string_view value =
          has_value ? FormDecode(param.substr(eq + 1), value_scratch) : std::string_view();
      if constexpr (std::is_same_v<
                        std::invoke_result_t<Fn&, std::string_view, std::string_view, bool>,
                        bool>) {
        if (!fn(name, value, has_value)) return;
      } else {
        fn(name, value, has_value);
      }
    }
    if (amp == std::string_view::npos) return;
    query.remove_prefix(amp + 1);
  }
}

// The decoded value of the first parameter whose decoded name is `name` ("" when it has no
// '='), or nullopt when there is none.
std::optional<std::string> QueryValue(std::string_view query, std::string_view name);

}  // namespace tollgate::util
