// An HTTP/2 stream's header blocks, crossed to and from HTTP/1.1 (issue 34). Pure, unit-tested and
// fuzzed: every byte of a request's block comes from the client.
//
// An HTTP/2 stream reaches the exchange as the HTTP/1.1 request it means (docs/adr/0005), so the
// one request path, with every check it has, serves both. The crossing is where HTTP/2 could
// smuggle what HTTP/1.1 forbids: a line end or a space in a field or in `:path`, a second Host,
// a Transfer-Encoding, a field name in upper case. Anything such is malformed (RFC 9113 8.1.1,
// 8.2), and the stream is reset; nothing is mended.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tollgate::http {

struct H2Field {
  std::string name;
  std::string value;
};

// What the crossing learnt of a request.
struct H2Request {
  std::string method;
  bool grpc = false;     // content-type application/grpc (or application/grpc+proto, ...)
  bool chunked = false;  // a body of unknown length: sent on in chunked encoding
};

enum class H2HeadResult {
  kOk,
  kMalformed,  // RFC 9113 8.1.1: reset with PROTOCOL_ERROR
};

// Appends to `out` the HTTP/1.1 head of the request `fields` (a request's header block, in the
// order received, pseudo-header fields first) and says what it learnt into `request`.
// `has_body`: the HEADERS frame did not end the stream. Host comes from `:authority` (a `host`
// field must then be the same); cookies are joined (RFC 9113 8.2.3); `expect` is dropped (the
// body is sent on as it comes).
H2HeadResult RenderH1Request(std::span<const H2Field> fields, bool has_body, std::string& out,
                             H2Request& request);

// Whether an HTTP/1.1 response field goes on in HTTP/2: not the connection's own (RFC 9113
// 8.2.2: Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding, Upgrade, TE), nor one the
// response's Connection field names (`connection`: its value).
bool CrossesToH2(std::string_view name, std::string_view connection);

// gRPC (issue 34): the grpc-status of an HTTP answer that is not gRPC's (ours, or a plain HTTP
// upstream's), after gRPC's own table (doc/http-grpc-status-mapping.md), but a 429 of a limit is
// RESOURCE_EXHAUSTED (8), as gRPC servers report their own limits.
int GrpcStatusOf(int http_status);
// `text` as a grpc-message: bytes outside 0x20-0x7E, and '%', percent-encoded.
std::string GrpcMessage(std::string_view text);

}  // namespace tollgate::http
