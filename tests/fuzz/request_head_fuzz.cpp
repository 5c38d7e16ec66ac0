// libFuzzer target: ParseRequestHead on arbitrary bytes, against Beast's parser. Whatever the
// in-place parser accepts, Beast's must accept as the same request (see tests/fuzz/run.sh).
#include <tollgate/http/request_head.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <boost/beast/http.hpp>

namespace {

namespace bhttp = boost::beast::http;
using Fields = std::vector<std::pair<std::string, std::string>>;

// Fields by lower-case name, in order within a name (Beast groups repeated names).
Fields ByName(Fields v) {
  for (auto& f : v) {
    for (char& c : f.first) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return v;
}

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  tollgate::http::RequestHead head;
  size_t used = 0;
  const auto result = tollgate::http::ParseRequestHead(input, 8192, head, &used);
  if (result != tollgate::http::HeadParse::kComplete) return 0;
  Check(used <= size && used <= 8192);
  bhttp::request_parser<bhttp::empty_body> p;
  p.header_limit(8192);
  boost::beast::error_code ec;
  const size_t beast_used = p.put(boost::asio::buffer(data, size), ec);
  Check(!ec && p.is_header_done() && p.is_done() && beast_used == used);
  const auto& m = p.get();
  Check(m.method_string() == head.method && m.target() == head.target &&
        m.version() == head.version);
  Check(m.keep_alive() == head.keep_alive && !p.chunked() && !head.chunked);
  Fields beast, fast;
  for (const auto& f : m) beast.emplace_back(f.name_string(), f.value());
  for (const auto& f : head.fields) fast.emplace_back(f.name, f.value);
  Check(ByName(beast) == ByName(fast));
  return 0;
}
