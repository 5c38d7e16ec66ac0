// libFuzzer target: ChunkedFraming on arbitrary bytes, against Beast's parser. Whatever the
// scanner says of a body it must say the same whether the bytes come at once or one at a time,
// and a body it says ended must be one Beast's parser accepts whole, ending at the same byte
// (the scanner is stricter than Beast, never looser: the gateway decodes with Beast); and tighter
// limits never accept what the default ones refuse.
#include <tollgate/http/chunked_framing.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <boost/beast/http.hpp>

namespace bhttp = boost::beast::http;
using tollgate::http::ChunkedFraming;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  size_t used = 0;
  ChunkedFraming whole;
  const ChunkedFraming::Result r = whole.Scan(body, &used);
  ChunkedFraming bytes;
  ChunkedFraming::Result rb = ChunkedFraming::Result::kMore;
  size_t at = 0;
  for (; at < body.size() && rb == ChunkedFraming::Result::kMore; ++at) {
    rb = bytes.Scan(body.substr(at, 1));
  }
  if (r != rb) std::abort();
  if (r == ChunkedFraming::Result::kDone && at != used) std::abort();
  // Tighter limits (issue 31) only ever refuse more: never a body the default ones refuse.
  ChunkedFraming tight(
      tollgate::http::ChunkedLimits{.line_bytes = 16, .trailer_bytes = 32, .trailer_fields = 2});
  const ChunkedFraming::Result rt = tight.Scan(body);
  if (rt == ChunkedFraming::Result::kDone && r != ChunkedFraming::Result::kDone) std::abort();
  if (r == ChunkedFraming::Result::kBad && rt == ChunkedFraming::Result::kMore) std::abort();
  if (r != ChunkedFraming::Result::kDone) return 0;

  static constexpr std::string_view kHead =
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string message = std::string(kHead) + std::string(body.substr(0, used));
  bhttp::request_parser<bhttp::string_body> p;
  p.eager(true);
  p.body_limit(boost::none);
  boost::beast::error_code ec;
  const size_t n = p.put(boost::asio::buffer(message.data(), message.size()), ec);
  if (ec || !p.is_done() || n != message.size()) std::abort();
  return 0;
}
