// ReadUpgradeAsk and CheckSwitch (src/http/upgrade_head.cpp): what a client's Upgrade asks and
// whether an upstream's 101 answers it (issue 33).
#include "http/upgrade_head.hpp"

#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

constexpr std::string_view kKey = "dGhlIHNhbXBsZSBub25jZQ==";  // RFC 6455's example

// A WebSocket handshake, with `drop` left out and `extra` added.
RequestHead Handshake(std::vector<RequestHead::Field> extra = {}, std::string_view drop = {}) {
  RequestHead h;
  h.method = "GET";
  h.target = "/chat";
  for (RequestHead::Field f : std::vector<RequestHead::Field>{{"Host", "example.com"},
                                                              {"Upgrade", "websocket"},
                                                              {"Connection", "Upgrade"},
                                                              {"Sec-WebSocket-Key", kKey},
                                                              {"Sec-WebSocket-Version", "13"}}) {
    if (f.name != drop) h.fields.push_back(f);
  }
  for (const RequestHead::Field& f : extra) h.fields.push_back(f);
  return h;
}

const std::vector<std::string> kWebSocket = {"websocket"};

TEST(UpgradeHead, AWellFormedHandshakeIsAnUpgrade) {
  const UpgradeAsk a = ReadUpgradeAsk(Handshake(), kWebSocket);
  EXPECT_EQ(a.kind, UpgradeAsk::Kind::kUpgrade);
  EXPECT_EQ(a.protocol, "websocket");
  EXPECT_TRUE(a.websocket);
}

TEST(UpgradeHead, NoUpgradeFieldIsNone) {
  RequestHead h;
  h.method = "GET";
  h.fields = {{"Host", "a"}, {"Connection", "upgrade"}};
  EXPECT_EQ(ReadUpgradeAsk(h, kWebSocket).kind, UpgradeAsk::Kind::kNone);
}

TEST(UpgradeHead, ProtocolsNotAllowedAreIgnored) {
  RequestHead h = Handshake({}, "Upgrade");
  h.fields.push_back({"Upgrade", "h2c"});
  EXPECT_EQ(ReadUpgradeAsk(h, kWebSocket).kind, UpgradeAsk::Kind::kNone);
  EXPECT_EQ(ReadUpgradeAsk(Handshake(), {}).kind, UpgradeAsk::Kind::kNone);
}

TEST(UpgradeHead, TheFirstAllowedProtocolOfTheListIsChosen) {
  RequestHead h = Handshake({}, "Upgrade");
  h.fields.push_back({"Upgrade", "h2c, foo/2"});
  h.fields.push_back({"Upgrade", "WebSocket"});
  const std::vector<std::string> allowed = {"websocket", "foo/2"};
  const UpgradeAsk a = ReadUpgradeAsk(h, allowed);
  EXPECT_EQ(a.kind, UpgradeAsk::Kind::kUpgrade);
  EXPECT_EQ(a.protocol, "foo/2");
  EXPECT_FALSE(a.websocket);
}

TEST(UpgradeHead, ConnectionMayNameUpgradeOnAnyLineInAnyCase) {
  RequestHead h = Handshake({}, "Connection");
  h.fields.push_back({"Connection", "keep-alive"});
  h.fields.push_back({"Connection", "foo, UPGRADE"});
  EXPECT_EQ(ReadUpgradeAsk(h, kWebSocket).kind, UpgradeAsk::Kind::kUpgrade);
}

// Every malformed handshake of the class, each refused with its status.
TEST(UpgradeHead, MalformedHandshakesAreRefused) {
  struct Row {
    const char* name;
    RequestHead head;
  };
  std::vector<Row> rows;
  rows.push_back({"no key", Handshake({}, "Sec-WebSocket-Key")});
  rows.push_back({"two keys", Handshake({{"Sec-WebSocket-Key", kKey}})});
  rows.push_back({"short key", Handshake({}, "Sec-WebSocket-Key")});
  rows.back().head.fields.push_back({"Sec-WebSocket-Key", "c2hvcnQ="});
  rows.push_back({"key not base64", Handshake({}, "Sec-WebSocket-Key")});
  rows.back().head.fields.push_back({"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25j*Q=="});
  rows.push_back({"no version", Handshake({}, "Sec-WebSocket-Version")});
  rows.push_back({"two versions", Handshake({{"Sec-WebSocket-Version", "13"}})});
  rows.push_back({"version 8", Handshake({}, "Sec-WebSocket-Version")});
  rows.back().head.fields.push_back({"Sec-WebSocket-Version", "8"});
  rows.push_back({"no Connection: upgrade", Handshake({}, "Connection")});
  rows.back().head.fields.push_back({"Connection", "keep-alive"});
  rows.push_back({"POST", Handshake()});
  rows.back().head.method = "POST";
  rows.push_back({"a body", Handshake()});
  rows.back().head.content_length = 5;
  rows.push_back({"chunked", Handshake()});
  rows.back().head.chunked = true;
  rows.push_back({"HTTP/1.0", Handshake()});
  rows.back().head.version = 10;
  for (const Row& r : rows) {
    const UpgradeAsk a = ReadUpgradeAsk(r.head, kWebSocket);
    EXPECT_EQ(a.kind, UpgradeAsk::Kind::kInvalid) << r.name;
    EXPECT_EQ(a.protocol, "websocket") << r.name;
    EXPECT_TRUE(a.websocket) << r.name;
    EXPECT_NE(a.detail, nullptr) << r.name;
  }
}

TEST(UpgradeHead, OtherProtocolsNeedNoWebSocketFields) {
  RequestHead h;
  h.method = "OPTIONS";
  h.fields = {{"Host", "a"}, {"Upgrade", "foo"}, {"Connection", "upgrade"}};
  const std::vector<std::string> allowed = {"foo"};
  EXPECT_EQ(ReadUpgradeAsk(h, allowed).kind, UpgradeAsk::Kind::kUpgrade);
  h.content_length = 0;  // an empty body is none
  EXPECT_EQ(ReadUpgradeAsk(h, allowed).kind, UpgradeAsk::Kind::kUpgrade);
}

TEST(UpgradeHead, ASwitchMustNameTheProtocolAsked) {
  EXPECT_EQ(CheckSwitch("websocket", "websocket"), nullptr);
  EXPECT_EQ(CheckSwitch("websocket", " WebSocket "), nullptr);
  EXPECT_NE(CheckSwitch("websocket", "h2c"), nullptr);
  EXPECT_NE(CheckSwitch("websocket", ""), nullptr);
  EXPECT_NE(CheckSwitch("websocket", "websocket, h2c"), nullptr);
  EXPECT_NE(CheckSwitch("", "websocket"), nullptr);  // not asked
}

}  // namespace
}  // namespace tollgate::http
