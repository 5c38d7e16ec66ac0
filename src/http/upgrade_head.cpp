#include "upgrade_head.hpp"

#include <algorithm>

#include <tollgate/util/ascii.hpp>

namespace tollgate::http {

namespace {

using util::AnyListElement;
using util::EqualsIgnoreCase;

// Whether any element of any line named `name` satisfies `pred` (a list field may be split over
// lines, RFC 9110 5.3).
template <class Pred>
bool AnyElement(const RequestHead& head, std::string_view name, Pred pred) {
  return std::any_of(head.fields.begin(), head.fields.end(), [&](const RequestHead::Field& f) {
    return EqualsIgnoreCase(f.name, name) && AnyListElement(f.value, pred);
  });
}

// The value of the one line named `name`; false when there is none or more than one.
bool OnlyValue(const RequestHead& head, std::string_view name, std::string_view& value) {
  size_t n = 0;
  for (const RequestHead::Field& f : head.fields) {
    if (EqualsIgnoreCase(f.name, name) && n++ == 0) value = util::Trim(f.value);
  }
  return n == 1;
}

// RFC 6455 4.1: a nonce of 16 bytes in base64, so 22 characters of its alphabet then "==".
bool IsWebSocketKey(std::string_view key) {
  if (key.size() != 24 || key.substr(22) != "==") return false;
  return std::all_of(key.begin(), key.begin() + 22, [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
  });
}

}  // namespace

UpgradeAsk ReadUpgradeAsk(const RequestHead& head, std::span<const std::string> allowed) {
  UpgradeAsk ask;
  AnyElement(head, "Upgrade", [&](std::string_view token) {
    const bool ok = std::any_of(allowed.begin(), allowed.end(), [token](const std::string& a) {
      return EqualsIgnoreCase(a, token);
    });
    if (ok) ask.protocol = token;
    return ok;
  });
  // Nothing allowed asked: the field is ignored, as RFC 9110 7.8 lets a server do (h2c too).
  if (ask.protocol.empty()) return ask;
  ask.websocket = EqualsIgnoreCase(ask.protocol, "websocket");
  auto Invalid = [&ask](const char* detail) {
    ask.kind = UpgradeAsk::Kind::kInvalid;
    ask.detail = detail;
    return ask;
  };
  // RFC 9110 7.8: no upgrade in HTTP/1.0 (refused rather than ignored: the client waits for a
  // switch that would never come); the sender names it in Connection.
  if (head.version < 11) return Invalid("an upgrade needs HTTP/1.1");
  if (!AnyElement(head, "Connection",
                  [](std::string_view t) { return EqualsIgnoreCase(t, "upgrade"); })) {
    return Invalid("Upgrade without \"Connection: upgrade\"");
  }
  // A body would have to be read whole before the switch; no protocol in use sends one.
  if (head.chunked || head.content_length.value_or(0) > 0)
    return Invalid("an upgrade request has no body");
  if (ask.websocket) {
    // RFC 6455 4.2.1.
    if (head.method != "GET") return Invalid("a WebSocket handshake is a GET");
    std::string_view key, version;
    if (!OnlyValue(head, "Sec-WebSocket-Key", key) || !IsWebSocketKey(key))
      return Invalid("Sec-WebSocket-Key must be sent once, 16 bytes in base64");
    if (!OnlyValue(head, "Sec-WebSocket-Version", version))
      return Invalid("Sec-WebSocket-Version must be sent once");
    if (version != "13") return Invalid("only WebSocket version 13 is supported");
  }
  ask.kind = UpgradeAsk::Kind::kUpgrade;
  return ask;
}

const char* CheckSwitch(std::string_view protocol, std::string_view upgrade) {
  if (protocol.empty()) return "the upstream switched protocols unasked";
  if (!EqualsIgnoreCase(util::Trim(upgrade), protocol))
    return "the upstream switched to another protocol than the one asked";
  return nullptr;
}

}  // namespace tollgate::http
