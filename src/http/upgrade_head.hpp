// What an Upgrade (RFC 9110 7.8) asks and what the upstream answers to it (issue 33): pure
// checks of parsed heads, unit-tested (tests/unit/http/upgrade_head_test.cpp). The relay itself
// is the tunnel's (tunnel.hpp).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include <tollgate/http/request_head.hpp>

namespace tollgate::http {

// What a client's request asks of an upgrade.
struct UpgradeAsk {
  enum class Kind {
    kNone,     // no upgrade asked, or only of protocols not allowed (the Upgrade field is ignored)
    kUpgrade,  // an allowed protocol, well asked: `protocol` is what the upstream is asked for
    kInvalid,  // a malformed handshake: answered 400 invalid_upgrade with `detail`
  };
  Kind kind = Kind::kNone;
  std::string_view protocol;  // the client's token, as it spelt it (kUpgrade and kInvalid)
  bool websocket = false;     // the protocol is WebSocket (RFC 6455's checks apply)
  const char* detail = nullptr;
};

// Reads the Upgrade of `head` against `allowed` (server.upgrades: tokens, any case). The first
// of the client's tokens that is allowed is chosen. An upgrade is refused (kInvalid) when it has
// a body, comes in HTTP/1.0, or is not named in Connection; a WebSocket one also when it is not
// a GET, or its Sec-WebSocket-Key is missing, repeated or not 16 bytes in base64, or its
// Sec-WebSocket-Version is missing, repeated or not 13. Every line of Upgrade and
// Connection counts (they are lists).
UpgradeAsk ReadUpgradeAsk(const RequestHead& head, std::span<const std::string> allowed);

// Whether an upstream's 101 answers the upgrade that was asked: `protocol` (empty when none was
// asked) against the answer's Upgrade value, which must name it alone (any case). Its
// Connection is not read: the client gets ours. Null when it does; else why not (the client
// gets 502 upstream_invalid_upgrade).
const char* CheckSwitch(std::string_view protocol, std::string_view upgrade);

}  // namespace tollgate::http
