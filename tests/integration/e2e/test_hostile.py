#!/usr/bin/env python3
"""Hostile requests through the real binary: every byte under the test's control, every byte the
upstream receives recorded (tests/support/raw_upstream.py).

    python3 test_hostile.py --binary build/tollgate [unittest args, e.g. TargetTableTests -v]

The contract (DESIGN.md, Gateway): what is limited is what is served. The request target is
made canonical once, and that one form is matched against routes, costed, logged and forwarded;
identity comes only from what tollgate sets or a trusted proxy sent; the upstream pool never
hands one client's leftovers to another, never re-sends a non-idempotent request, and queues
rather than fails when every connection is busy.

- TargetTableTests: one gateway (config of examples/tollgate.yaml's shape) in front of a
  recording upstream, and TABLE: one raw request per row, with what the client must get back and
  what the upstream must (or must not) receive. Plus the scenarios that take several requests
  (pipelining, X-Forwarded-For lines, the login route's per-address budget).
- Decision*Tests: the decision listener behind nginx / Traefik (DECISION_TABLE).
- Upstream*Tests: the pool against upstreams that misbehave the way real ones do.

Every gateway is started once per class (setUpClass) and stopped by PID (tearDownClass); every
wait is bounded; all traffic is on 127.0.0.1 (and 127.0.0.2 as an untrusted peer).
"""
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "support")))
import harness  # noqa: E402
from harness import SLOW, burst, reserve_port  # noqa: E402
from raw_upstream import RawUpstream  # noqa: E402

HOST = "api.test"
PEER = "127.0.0.1"            # the test's own address: a trusted proxy of the main gateway
UNTRUSTED_PEER = "127.0.0.2"  # another loopback address, in no trusted_proxies
ANON = 4                      # anonymous (per client address) token bucket capacity
KEY_CAP = 1000                # every key's plan: a bucket this large, never refilled in a test
PLAN = "big"
READ_TIMEOUT_S = 3.0
TRACE = os.environ.get("TOLLGATE_HOSTILE_TRACE") == "1"  # print each row's outcome

# Keys handed out one per row (FRESH), so every row starts from a full bucket of known size and
# its access-log line is found by the key id.
KEYS = [("sk-hostile-%03d-0123456789abcdef" % i, "k%03d" % i) for i in range(320)]
FRESH = "<fresh key>"

_counter_lock = threading.Lock()
_next = {"key": 0, "ip": 0}


def fresh_key():
    with _counter_lock:
        i = _next["key"]
        _next["key"] += 1
    return KEYS[i]


def fresh_ip():
    """A client address never used before (198.18.0.0/15, the benchmarking range): a full
    anonymous bucket."""
    with _counter_lock:
        i = _next["ip"]
        _next["ip"] += 1
    return "198.18.%d.%d" % (i // 250, i % 250 + 1)


# ---------------------------------------------------------------------------------------------
# The table: one raw request per row through the gateway of TargetTableTests.
#
# Request fields: method ("GET"), target (str, or bytes for raw bytes), version ("HTTP/1.1"),
#   host (HOST; None: no Host line), headers [(name, value) or a raw bytes line], key (None,
#   FRESH or a literal key) sent in key_header ("Authorization": "Bearer <key>"), xff (True: the
#   runner adds "X-Forwarded-For: <fresh address>" last, as the trusted proxy in front would),
#   body (sent with Content-Length), or raw (the whole request). "{ip}" in
#   header values, xff_up and raw is the row's fresh address; "{key}" its key.
# Expectations: status (int or set); code (the error body's "code": str or set); line /
#   line_re (the request line the upstream received: the row must be forwarded exactly once);
#   bucket ("key": RateLimit-Limit is the key's plan; "ip": the anonymous per-address limit) and
#   cost (1): RateLimit-Remaining = capacity - cost on a fresh identity; ident (True: the
#   gateway's X-Tollgate-Key-Id / X-Tollgate-Plan for the key; False: none; None: not forged);
#   xff_up (the one X-Forwarded-For the upstream gets; default "<fresh address>, 127.0.0.1"),
#   host_up, up_headers {name: value}, up_absent [names], body_up; closed (the gateway closes
#   the connection after its answer); may_answer (a 2xx may come from the gateway itself);
#   forwarded=False (a 2xx the gateway answers itself: nothing reaches the upstream).
# Every forwarded row is also checked for: one Host, one X-Forwarded-For, no header an
#   upstream could read as X-Tollgate-* / X-Forwarded-For / X-API-Key (any case, '_' for '-')
#   except the gateway's own X-Tollgate-Key-Id and X-Tollgate-Plan.
# Every row that is not 2xx must reach the upstream not at all.

BAD_TARGET = "invalid_request_target"
BAD_BYTES = {"invalid_request_target", "bad_request"}  # refused by the target or by the parser
BAD_TE = {"invalid_transfer_encoding", "bad_request"}
SMUGGLED = b"GET /public/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"


def ok_ip(name, target, line_target, method="GET", **kw):
    """Forwarded on an identity: ip route (/public/*, POST /login): no key needed."""
    row = dict(name=name, method=method, target=target, status=200, bucket="ip",
               line="%s %s HTTP/1.1" % (method, line_target))
    row.update(kw)
    return row


def ok_key(name, target, line_target, method="GET", cost=1, **kw):
    """Forwarded on a keyed route, with a fresh key: the key's bucket drops by `cost`."""
    row = dict(name=name, method=method, target=target, key=FRESH, status=200, bucket="key",
               cost=cost, line="%s %s HTTP/1.1" % (method, line_target))
    row.update(kw)
    return row


def keyed_401(name, target, method="GET", **kw):
    """Lands on a keyed route (the default): without a key, 401 and nothing forwarded."""
    row = dict(name=name, method=method, target=target, status=401, code="missing_api_key")
    row.update(kw)
    return row


def refused(name, target, method="GET", code=BAD_TARGET, **kw):
    """Refused with 400 whatever the route (a valid key is sent: it is not an auth failure)."""
    row = dict(name=name, method=method, target=target, key=FRESH, status=400, code=code)
    row.update(kw)
    return row


def framing(name, lines, body=SMUGGLED, version="HTTP/1.1", code=BAD_TE):
    """A POST whose framing is refused: 400, the connection closed, and nothing (neither the
    request nor the request hidden in its body) reaches the upstream."""
    raw = (b"POST /public/f HTTP/" + version.split("/")[1].encode() + b"\r\nHost: " +
           HOST.encode() + b"\r\n" + b"".join(l + b"\r\n" for l in lines) +
           b"X-Forwarded-For: {ip}\r\n\r\n" + body)
    return dict(name=name, raw=raw, status=400, code=code, closed=True)


TABLE = [
    # --- Dot segments: every spelling of "/public/.." leaves the anonymous route. ---
    keyed_401("dotdot", "/public/../v1/items"),
    ok_key("dotdot_with_key", "/public/../v1/items", "/v1/items"),
    keyed_401("dotdot_encoded_lower", "/public/%2e%2e/v1/items"),
    keyed_401("dotdot_encoded_mixed", "/public/%2E%2e/v1/items"),
    keyed_401("dotdot_half_encoded", "/public/.%2e/v1/items"),
    keyed_401("dotdot_half_encoded_first", "/public/%2e./v1/items"),
    ok_key("dotdot_encoded_with_key", "/public/%2E%2E/v1/items", "/v1/items"),
    refused("dotdot_encoded_slash", "/public/..%2fv1/items"),
    refused("dotdot_encoded_slash_upper", "/public/..%2Fv1/items"),
    keyed_401("dot_then_dotdot", "/public/./../v1/items"),
    refused("dotdot_semicolon_tomcat", "/public/..;/v1/items"),
    refused("dotdot_backslash", b"/public/..\\v1/items", code=BAD_BYTES),
    refused("fragment_then_dotdot", "/public/x#/../../v1/items"),
    keyed_401("two_up", "/public/a/../../v1/items"),
    ok_key("two_up_with_key", "/public/a/../../v1/items", "/v1/items"),
    ok_ip("dotdot_above_root", "/../public/x", "/public/x"),
    ok_ip("dotdot_at_end", "/public/a/..", "/public/"),
    keyed_401("dotdot_to_root", "/public/.."),
    ok_ip("dot_at_end", "/public/.", "/public/"),
    ok_ip("encoded_dot_at_end", "/public/a/%2e", "/public/a/"),
    ok_ip("three_dots_is_a_name", "/public/...", "/public/..."),
    ok_ip("dotdot_prefix_is_a_name", "/public/..a/x", "/public/..a/x"),
    ok_ip("double_encoded_dotdot_stays", "/public/%252e%252e/v1/items",
          "/public/%252e%252e/v1/items"),
    ok_ip("double_encoded_slash_stays", "/public/a%252fb", "/public/a%252fb"),

    # --- The login route (POST /login, identity ip) under every spelling. ---
    ok_ip("login", "/login", "/login", method="POST"),
    ok_ip("login_double_slash", "//login", "/login", method="POST"),
    ok_ip("login_dot", "/./login", "/login", method="POST"),
    ok_ip("login_encoded", "/%6cogin", "/login", method="POST"),
    ok_ip("login_encoded_upper_hex", "/%6Cogin", "/login", method="POST"),
    ok_ip("login_encoded_last", "/logi%6e", "/login", method="POST"),
    ok_ip("login_trailing_slash", "/login/", "/login/", method="POST"),
    ok_ip("login_query", "/login?next=/x", "/login?next=/x", method="POST"),
    ok_ip("login_via_public_dotdot", "/public/../login", "/login", method="POST"),
    ok_ip("login_double_slash_with_key_is_per_ip", "//login", "/login", method="POST", key=FRESH,
          ident=None),
    ok_ip("login_encoded_with_key_is_per_ip", "/%6cogin", "/login", method="POST", key=FRESH,
          ident=None),
    # Routes fold (issue 31): an upstream that routes case-insensitively runs the login handler.
    ok_ip("login_upper_case_is_the_login_route", "/LOGIN", "/LOGIN", method="POST"),
    keyed_401("login_get_is_another_route", "/login"),
    keyed_401("login_head_is_another_route", "/login", method="HEAD"),
    keyed_401("login_dotdot_out", "/login/..", method="POST"),
    refused("login_path_parameter", "/login;jsessionid=x", method="POST"),
    refused("login_encoded_slash", "/login%2f", method="POST"),

    # --- Absolute-form and the other request-target forms. ---
    ok_ip("absolute_login", "http://127.0.0.1/login", "/login", method="POST", host_up="127.0.0.1"),
    ok_ip("absolute_scheme_upper_case", "HTTP://EXAMPLE.com/public/a", "/public/a",
          host_up="example.com"),
    ok_ip("absolute_with_port_and_query", "http://127.0.0.1:9999/public/a?x=1", "/public/a?x=1",
          host_up="127.0.0.1:9999"),
    ok_key("absolute_without_path", "http://127.0.0.1", "/", host_up="127.0.0.1"),
    keyed_401("absolute_dotdot", "http://h.test/public/../v1/items"),
    ok_ip("absolute_https", "https://h.test/public/a", "/public/a", host_up="h.test"),
    refused("absolute_userinfo", "http://user:pw@127.0.0.1/public/a"),
    refused("absolute_userinfo_no_password", "http://evil@127.0.0.1/public/a"),
    refused("absolute_other_scheme", "ftp://h.test/public/a"),
    refused("absolute_fragment", "http://h.test/public/a#x"),
    refused("asterisk_with_get", "*"),
    dict(name="asterisk_with_options", method="OPTIONS", target="*", key=FRESH,
         status={200, 204}, line="OPTIONS * HTTP/1.1", may_answer=True, ident=None),
    dict(name="asterisk_with_options_no_key", method="OPTIONS", target="*",
         status={200, 204, 401}, line="OPTIONS * HTTP/1.1", may_answer=True, ident=None),
    refused("authority_form_connect", "127.0.0.1:80", method="CONNECT", status={400, 405},
            code=None),
    refused("relative_path", "public/x"),

    # --- Prefix routes match whole segments; paths are case-sensitive. ---
    ok_ip("public_without_slash", "/public", "/public"),
    keyed_401("publicity_is_not_public", "/publicity"),
    ok_ip("public_upper_case", "/Public/x", "/Public/x"),
    ok_ip("public_trailing_slash", "/public/", "/public/"),
    ok_ip("public_double_slash", "/public//a", "/public/a"),
    ok_ip("leading_triple_slash", "///public///a", "/public/a"),
    ok_ip("encoded_first_letter", "/%70ublic/x", "/public/x"),

    # --- Percent-encoding: unreserved decoded, the rest kept (hex upper case), the dangerous
    #     refused. ---
    ok_ip("encoded_tilde_decoded", "/public/%7Euser", "/public/~user"),
    ok_ip("encoded_letters_decoded", "/public/%41%62c", "/public/Abc"),
    ok_ip("encoded_utf8_kept_upper_hex", "/public/caf%c3%a9", "/public/caf%C3%A9"),
    ok_ip("encoded_space_kept", "/public/a%20b", "/public/a%20b"),
    ok_ip("encoded_percent_kept", "/public/100%25", "/public/100%25"),
    ok_ip("rfc3986_excluded_bytes_kept", "/public/a|b", "/public/a|b"),
    refused("encoded_nul", "/public/a%00b"),
    refused("encoded_crlf_header_injection", "/public/a%0d%0aX-Tollgate-Key-Id:%20admin"),
    refused("encoded_tab", "/public/a%09b"),
    refused("encoded_del", "/public/a%7fb"),
    ok_ip("encoded_crlf_in_query_stays_encoded", "/public/a?x=%0d%0aSet-Cookie:%20a", "/public/a?x=%0D%0ASet-Cookie:%20a"),
    refused("encoded_backslash_dotdot", "/public/..%5cv1/items"),
    refused("encoded_backslash_upper", "/public/a%5Cb"),
    refused("encoded_slash", "/public/a%2fb"),
    refused("percent_at_end", "/public/a%"),
    refused("percent_not_hex", "/public/a%zz"),
    refused("percent_one_digit", "/public/a%4"),
    refused("percent_not_hex_in_query", "/public/a?x=%g1"),
    refused("raw_backslash", b"/public\\..\\v1/items", code=BAD_BYTES),
    refused("raw_non_ascii", b"/public/caf\xc3\xa9", code=BAD_BYTES),
    refused("raw_del", b"/public/a\x7fb", code=BAD_BYTES),
    refused("raw_tab", b"/public/a\tb", code=BAD_BYTES),
    refused("raw_space", b"/public/a b", code=BAD_BYTES),
    refused("fragment", "/public/a#frag"),
    refused("fragment_after_query", "/public/a?x=1#frag"),
    refused("path_parameter", "/public/a;b=c"),

    # --- The query: kept, unreserved decoded, hex upper case. ---
    ok_ip("semicolon_in_query_kept", "/public/a?x=1;y=2", "/public/a?x=1;y=2"),
    ok_ip("query_unreserved_decoded", "/public/a?n%61me=v%7E", "/public/a?name=v~"),
    ok_ip("query_plus_and_encoded_slash_kept", "/public/a?q=a+b&r=%2F", "/public/a?q=a+b&r=%2F"),
    ok_ip("query_hex_upper_cased", "/public/a?r=%2f", "/public/a?r=%2F"),
    ok_ip("query_empty_kept", "/public/a?", "/public/a?"),

    # --- Request cost: GET /v1/export costs max(1, ceil(pages / 50)). ---
    ok_key("export_5000_costs_100", "/v1/export?pages=5000", "/v1/export?pages=5000", cost=100),
    ok_key("export_50_costs_1", "/v1/export?pages=50", "/v1/export?pages=50", cost=1),
    ok_key("export_51_costs_2", "/v1/export?pages=51", "/v1/export?pages=51", cost=2),
    ok_key("export_0_costs_min", "/v1/export?pages=0", "/v1/export?pages=0", cost=1),
    ok_key("export_trailing_slash", "/v1/export/?pages=5000", "/v1/export/?pages=5000", cost=100),
    ok_key("export_head", "/v1/export?pages=5000", "/v1/export?pages=5000", method="HEAD",
           cost=100),
    ok_key("export_encoded_param_name", "/v1/export?pag%65s=5000", "/v1/export?pages=5000",
           cost=100),
    ok_key("export_encoded_param_value", "/v1/export?pages=%35000", "/v1/export?pages=5000",
           cost=100),
    ok_key("export_repeated_param_largest", "/v1/export?pages=1&pages=5000",
           "/v1/export?pages=1&pages=5000", cost=100),
    ok_key("export_repeated_param_largest_first", "/v1/export?pages=5000&pages=1",
           "/v1/export?pages=5000&pages=1", cost=100),
    ok_key("export_double_slash", "//v1/export?pages=5000", "/v1/export?pages=5000", cost=100),
    ok_key("export_dot_segment", "/v1/./export?pages=5000", "/v1/export?pages=5000", cost=100),
    ok_key("export_encoded_path", "/v1/%65xport?pages=5000", "/v1/export?pages=5000", cost=100),
    ok_key("export_via_public_dotdot", "/public/../v1/export?pages=5000", "/v1/export?pages=5000",
           cost=100),
    ok_key("export_absolute_form", "http://127.0.0.1/v1/export?pages=5000",
           "/v1/export?pages=5000", cost=100, host_up="127.0.0.1"),
    ok_key("export_double_trailing_slash", "/v1/export//?pages=5000", "/v1/export/?pages=5000",
           cost=100),
    ok_key("export_deeper_path_is_not_the_route", "/v1/export/x?pages=5000",
           "/v1/export/x?pages=5000", cost=1),
    ok_key("export_upper_case_is_the_route", "/v1/EXPORT?pages=5000", "/v1/EXPORT?pages=5000",
           cost=100),
    ok_key("export_post_is_not_the_route", "/v1/export?pages=5000", "/v1/export?pages=5000",
           method="POST", cost=1),
    refused("export_pages_not_a_number", "/v1/export?pages=abc", code="invalid_cost"),
    refused("export_pages_negative", "/v1/export?pages=-1", code="invalid_cost"),
    refused("export_pages_exponent", "/v1/export?pages=5e3", code="invalid_cost"),
    refused("export_repeated_one_invalid", "/v1/export?pages=5000&pages=abc", code="invalid_cost"),
    refused("export_pages_overflow", "/v1/export?pages=99999999999999999999999", status={400, 429},
            code={"invalid_cost", "cost_exceeds_capacity"}),
    refused("export_path_parameter", "/v1/export;x?pages=5000"),

    # --- Built-in endpoints are matched on the canonical path too: answered, never forwarded. ---
    dict(name="status_endpoint_dot_segment", target="/public/../v1/rate-limit", key=FRESH,
         status=200, forwarded=False),
    dict(name="status_endpoint_encoded", target="/v1/%72ate-limit", key=FRESH, status=200,
         forwarded=False),

    # --- Identity headers: only the gateway's own reach the upstream. ---
    ok_key("forged_key_id_underscore_keyed", "/v1/items", "/v1/items",
           headers=[("X_Tollgate_Key_Id", "admin")]),
    ok_ip("forged_key_id_underscore_public", "/public/a", "/public/a",
          headers=[("X_Tollgate_Key_Id", "admin")]),
    ok_ip("forged_key_id_lower_case", "/public/a", "/public/a",
          headers=[("x-tollgate-key-id", "admin")]),
    ok_ip("forged_key_id_exact", "/public/a", "/public/a",
          headers=[("X-Tollgate-Key-Id", "admin")]),
    ok_key("forged_plan_upper_case_keyed", "/v1/items", "/v1/items",
           headers=[("X-TOLLGATE-PLAN", "enterprise")]),
    ok_ip("forged_plan_underscore", "/public/a", "/public/a",
          headers=[("X_TOLLGATE_PLAN", "enterprise")]),
    ok_ip("forged_tollgate_prefix", "/public/a", "/public/a",
          headers=[("X-Tollgate-Anything", "x"), ("x_tollgate_other", "y")]),
    ok_ip("forged_forwarded_for_underscore", "/public/a", "/public/a",
          headers=[("X_Forwarded_For", "1.2.3.4")]),
    ok_ip("forged_api_key_underscore", "/public/a", "/public/a",
          headers=[("X_API_Key", "sk-forged")]),
    ok_key("forged_key_id_twice", "/v1/items", "/v1/items",
           headers=[("X-Tollgate-Key-Id", "a"), ("X-Tollgate-Key-Id", "b")]),
    dict(name="underscore_api_key_is_not_a_key", target="/v1/items", key=FRESH,
         key_header="X_API_Key", status=401, code="missing_api_key"),
    ok_key("connection_cannot_strip_identity", "/v1/items", "/v1/items",
           headers=[("Connection", "X-Tollgate-Key-Id, X-Tollgate-Plan")]),
    ok_ip("connection_cannot_strip_forwarded_for", "/public/a", "/public/a",
          headers=[("Connection", "X-Forwarded-For")]),
    ok_ip("connection_strips_what_it_names", "/public/a", "/public/a",
          headers=[("Connection", "X-Hop"), ("X-Hop", "1")], up_absent=["X-Hop"]),
    ok_key("api_key_header_lower_case", "/v1/items", "/v1/items", key_header="x-api-key"),
    dict(name="api_key_space_before_colon", target="/v1/items",
         headers=[b"X-API-Key : " + KEYS[-1][0].encode()], status=400, code="bad_request"),
    dict(name="obs_fold_cannot_forge", target="/public/a",
         headers=[b"X-Foo: a", b" X-Tollgate-Key-Id: admin"], status={200, 400}, ident=False,
         bucket="ip", line="GET /public/a HTTP/1.1"),

    # --- X-Forwarded-For lines are one list (the peer, 127.0.0.1, is a trusted proxy). ---
    ok_ip("forwarded_for_two_lines", "/public/a", "/public/a", xff=False,
          headers=[("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-For", "{ip}")],
          xff_up="6.6.6.6, {ip}, 127.0.0.1"),
    ok_ip("forwarded_for_list_then_line", "/public/a", "/public/a", xff=False,
          headers=[("X-Forwarded-For", "1.1.1.1, 2.2.2.2"), ("x-forwarded-for", "{ip}")],
          xff_up="1.1.1.1, 2.2.2.2, {ip}, 127.0.0.1"),
    ok_ip("forwarded_for_none", "/public/a", "/public/a", xff=False, xff_up="127.0.0.1",
          bucket=None),

    # --- Framing: refused, closed, nothing smuggled. ---
    framing("te_xchunked", [b"Transfer-Encoding: xchunked"]),
    framing("te_chunked_identity", [b"Transfer-Encoding: chunked, identity"]),
    framing("te_chunked_twice", [b"Transfer-Encoding: chunked, chunked"]),
    framing("te_chunked_two_lines", [b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"]),
    framing("te_identity", [b"Transfer-Encoding: identity"]),
    framing("te_gzip", [b"Transfer-Encoding: gzip"]),
    framing("te_in_http10", [b"Transfer-Encoding: chunked"], body=b"0\r\n\r\n" + SMUGGLED,
            version="HTTP/1.0"),
    framing("te_space_before_colon", [b"Transfer-Encoding : chunked"], code=None),
    framing("te_vertical_tab", [b"Transfer-Encoding:\x0bchunked"], code=None),
    framing("cl_and_te", [b"Content-Length: 5", b"Transfer-Encoding: chunked"],
            body=b"0\r\n\r\n" + SMUGGLED, code=None),
    framing("cl_two_values", [b"Content-Length: 5", b"Content-Length: 6"], code=None),
    framing("cl_list", [b"Content-Length: 5, 6"], code=None),
    framing("cl_plus_sign", [b"Content-Length: +5"], code=None),
    framing("cl_negative", [b"Content-Length: -1"], code=None),
    framing("cl_hex", [b"Content-Length: 0x5"], code=None),
    framing("nul_in_value", [b"X-A: a\x00b"], code=None),
    framing("bare_cr_in_value", [b"X-A: a\rX-Tollgate-Key-Id: admin"], code=None),
    framing("bare_lf_in_head", [b"X-A: a\nX-Tollgate-Key-Id: admin"], code=None),
    framing("space_before_colon", [b"X-Foo : a"], code=None),
    framing("space_in_name", [b"X Foo: a"], code=None),
    dict(name="te_chunked_is_forwarded", status=200, bucket="ip",
         raw=b"POST /public/f HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n"
             b"X-Forwarded-For: {ip}\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
         line="POST /public/f HTTP/1.1", body_up=b"hello"),
    dict(name="te_chunked_any_case", status=200, bucket="ip",
         raw=b"POST /public/f HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: Chunked\r\n"
             b"X-Forwarded-For: {ip}\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
         line="POST /public/f HTTP/1.1", body_up=b"hello"),
    ok_ip("content_length_body_is_forwarded", "/public/f", "/public/f", method="POST",
          body=b"hello", body_up=b"hello"),

    # --- Host. ---
    dict(name="no_host_http11", target="/public/a", host=None, status=400, code="invalid_host"),
    dict(name="two_hosts", target="/public/a", headers=[("Host", "other.test")], status=400,
         code="invalid_host"),
    dict(name="host_space_and_userinfo", target="/public/a", host="a b@evil", status=400,
         code="invalid_host"),
    dict(name="host_userinfo", target="/public/a", host="evil@x", status=400, code="invalid_host"),
    dict(name="host_bad_port", target="/public/a", host="example.com:80x", status=400,
         code="invalid_host"),
    dict(name="host_with_path", target="/public/a", host="example.com/x", status=400,
         code="invalid_host"),
    ok_ip("host_ipv6_literal", "/public/a", "/public/a", host="[::1]:8080", host_up="[::1]:8080"),
    ok_ip("host_with_port", "/public/a", "/public/a", host="example.com:80",
          host_up="example.com:80"),
    ok_ip("http10_without_host", "/public/a", "/public/a", host=None, version="HTTP/1.0"),

    # --- The request line. ---
    dict(name="request_line_double_space", raw=b"GET  /public/a HTTP/1.1\r\nHost: api.test\r\n\r\n",
         status=400),
    dict(name="request_line_trailing_space",
         raw=b"GET /public/a HTTP/1.1 \r\nHost: api.test\r\n\r\n",
         status=400),
    dict(name="request_line_http2", raw=b"GET /public/a HTTP/2.0\r\nHost: api.test\r\n\r\n",
         status={400, 505}),
]

TABLE_NAMES = [r["name"] for r in TABLE]
assert len(TABLE_NAMES) == len(set(TABLE_NAMES)), "row names must be unique"


# ---------------------------------------------------------------------------------------------
# Raw HTTP on a socket.


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # [(name, value)]
        self.body = body

    def header(self, name, default=None):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return default

    @property
    def code(self):
        try:
            return json.loads(self.body.decode("utf-8")).get("code")
        except (ValueError, AttributeError):
            return None

    def __repr__(self):
        return "<%s %r %r>" % (self.status, self.headers, self.body[:300])


class RawClient:
    """One client connection; bytes in, responses parsed by their framing."""

    def __init__(self, port, source=None, timeout=READ_TIMEOUT_S):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.buf = b""
        self.eof = False

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _recv(self):
        if self.eof:
            return False
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _take(self, n):
        while len(self.buf) < n:
            if not self._recv():
                raise AssertionError("connection closed inside a response body")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self):
        while b"\r\n" not in self.buf:
            if not self._recv():
                raise AssertionError("connection closed inside a chunked body")
        i = self.buf.index(b"\r\n")
        out, self.buf = self.buf[:i], self.buf[i + 2:]
        return out

    def response(self, method="GET"):
        """The next final response, or None when the connection closed first. A read timeout
        raises socket.timeout."""
        for _ in range(10):  # interim responses (1xx) are skipped
            while b"\r\n\r\n" not in self.buf:
                if not self._recv():
                    if self.buf:
                        raise AssertionError("closed inside a response head: %r" % self.buf)
                    return None
            i = self.buf.index(b"\r\n\r\n")
            head, self.buf = self.buf[:i].decode("latin-1"), self.buf[i + 4:]
            lines = head.split("\r\n")
            m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
            if not m:
                raise AssertionError("not a status line: %r" % lines[0])
            status = int(m.group(1))
            headers = []
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers.append((k, v.strip()))
            if 100 <= status < 200:
                continue
            r = Resp(status, headers, b"")
            if method == "HEAD" or status in (204, 304):
                return r
            if (r.header("Transfer-Encoding") or "").lower() == "chunked":
                body = b""
                while True:
                    size = int(self._line().split(b";")[0], 16)
                    if size == 0:
                        while self._line():
                            pass
                        break
                    body += self._take(size)
                    self._take(2)
                r.body = body
            elif r.header("Content-Length") is not None:
                r.body = self._take(int(r.header("Content-Length")))
            else:
                while self._recv():
                    pass
                r.body, self.buf = self.buf, b""
            return r
        raise AssertionError("too many interim responses")

    def closed_within(self, seconds):
        """True when the peer closes (or resets) within `seconds` with nothing more sent."""
        self.sock.settimeout(seconds)
        try:
            return not self._recv() and not self.buf
        except socket.timeout:
            return False


def request_bytes(method, target, headers=(), body=b"", host=HOST, version="HTTP/1.1"):
    """A request head (and body, with Content-Length) from parts; bytes pass as they are."""
    enc = lambda s: s if isinstance(s, bytes) else s.encode("latin-1")  # noqa: E731
    lines = [enc(method) + b" " + enc(target) + b" " + enc(version)]
    if host is not None:
        lines.append(b"Host: " + enc(host))
    for h in headers:
        lines.append(h if isinstance(h, bytes) else enc("%s: %s" % h))
    if body:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def norm(name):
    """A field name as an upstream that ignores case and reads '_' as '-' sees it."""
    return name.lower().replace("_", "-")


# ---------------------------------------------------------------------------------------------
# Fixtures: one gateway per class.


class _ClassFixture:
    """What harness.Gateway needs of a fixture (tmpdir, spawn, held_sockets), for a class."""

    def __init__(self):
        self.tmpdir = tempfile.mkdtemp(prefix="tollgate-hostile-")
        self.processes = []
        self.held_sockets = []

    def spawn(self, name, argv):
        p = harness.Process("%s-%d" % (name, len(self.processes)), argv, self.tmpdir)
        self.processes.append(p)
        return p

    def close(self, dump=False):
        for p in reversed(self.processes):
            p.stop()
        for s in self.held_sockets:
            s.close()
        problems = []
        for p in self.processes:
            err = p.read_stderr()
            for marker in (b"ERROR: AddressSanitizer", b"ERROR: LeakSanitizer", b"runtime error:"):
                if marker in err:
                    problems.append("%s: sanitizer report (%s)" % (p.name, marker.decode()))
            if dump or problems:
                for label, data in (("stdout", p.read_stdout()), ("stderr", err)):
                    lines = data.decode(errors="replace").splitlines()
                    sys.stderr.write("---- %s %s (pid %d, exit %s, last %d of %d lines)\n" % (
                        p.name, label, p.pid, p.proc.returncode, min(60, len(lines)), len(lines)))
                    for line in lines[-60:]:
                        sys.stderr.write(line + "\n")
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        if problems:
            raise AssertionError("; ".join(problems))


def gateway_config(anon=ANON, trusted=("127.0.0.1/32",), **extra):
    """examples/tollgate.yaml's routes, keys on one large plan, a small anonymous bucket."""
    c = {
        "server": {"threads": 2, "access_log": True},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {PLAN: {"limits": [burst(KEY_CAP)]}},
        "keys": [{"key": k, "id": i, "account": "acct-" + i, "plan": PLAN} for k, i in KEYS],
        "routes": [
            {"path": "/v1/export", "method": "GET",
             "cost": {"query": "pages", "per": 50, "min": 1}},
            {"path": "/login", "method": "POST", "identity": "ip", "fail_mode": "closed"},
            {"path": "/public/*", "identity": "ip"},
        ],
        "anonymous": {"limits": [burst(anon, name="ip")]},
        "identity": {"api_key_headers": ["Authorization", "X-API-Key"],
                     "trusted_proxies": list(trusted)},
        "headers": ["ietf", "ratelimit", "x-ratelimit"],
    }
    c.update(extra)
    return c


class HostileCase(unittest.TestCase):
    """A recording upstream and a gateway in front of it, started once for the class."""

    maxDiff = None
    BEHAVIOUR = "normal"
    UPSTREAM_ARGS = {}
    DECISION = None  # {"proxy": ...}: also a decision listener

    @classmethod
    def config(cls):
        return gateway_config()

    @classmethod
    def setUpClass(cls):
        cls._failed = False
        cls.fixture = _ClassFixture()
        cls.upstream = None
        try:
            cls.upstream = RawUpstream(cls.BEHAVIOUR, **cls.UPSTREAM_ARGS).start()
            cfg = cls.config()
            cfg["upstream"] = dict(cfg.get("upstream", {}), url=cls.upstream.url)
            if cls.DECISION is not None:
                cls.decision_port, held = reserve_port()
                cls.fixture.held_sockets.append(held)
                cfg["decision"] = dict(cls.DECISION, listen="127.0.0.1:%d" % cls.decision_port)
            cls.gateway = harness.Gateway(cls.fixture, cfg)
            cls.port = cls.gateway.port
        except BaseException:
            cls._stop(dump=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls._stop(dump=cls._failed)

    @classmethod
    def _stop(cls, dump):
        try:
            cls.fixture.close(dump=dump)
        finally:
            if cls.upstream is not None:
                cls.upstream.stop()
                if dump and cls.upstream.errors:
                    sys.stderr.write("---- raw upstream errors\n%s\n" %
                                     "\n".join(cls.upstream.errors))

    def run(self, result=None):
        result = result if result is not None else self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        try:
            return super().run(result)
        finally:
            if len(result.failures) + len(result.errors) > before:
                type(self)._failed = True

    # Helpers.

    def exchange(self, data, method="GET", source=None, port=None):
        """Sends `data` on a new connection; returns (the first response, the client)."""
        c = RawClient(port or self.port, source=source)
        self.addCleanup(c.close)
        c.send(data)
        return c.response(method), c

    def get(self, target, method="GET", headers=(), body=b"", key=None, ip=None, **kw):
        h = list(headers)
        if ip:
            h.append(("X-Forwarded-For", ip))
        if key:
            h.append(("Authorization", "Bearer " + key))
        r, _ = self.exchange(request_bytes(method, target, h, body), method=method, **kw)
        self.assertIsNotNone(r, "no response to %s %s" % (method, target))
        return r

    def assertIdentityHeaders(self, req, key_id=None, plan=None, allowed_ids=None):
        """The upstream's view: no field an upstream could read as one of tollgate's own or as
        X-Forwarded-For / X-API-Key but those tollgate wrote, spelled as tollgate writes them."""
        ids, plans = [], []
        for name, value in req.headers:
            n = norm(name)
            if n.startswith("x-tollgate-"):
                self.assertIn(name, ("X-Tollgate-Key-Id", "X-Tollgate-Plan"),
                              "upstream got %r: %r" % (name, req))
                (ids if n == "x-tollgate-key-id" else plans).append(value)
            if n in ("x-forwarded-for", "x-api-key") and "_" in name:
                self.fail("upstream got %r: %r" % (name, req))
        if allowed_ids is not None:  # not forged: absent, or the key's own
            self.assertLessEqual(len(ids), 1, req)
            self.assertTrue(set(ids) <= set(allowed_ids), req)
            self.assertLessEqual(len(plans), 1, req)
            self.assertTrue(set(plans) <= {PLAN}, req)
        elif key_id is None:
            self.assertEqual((ids, plans), ([], []), "identity headers forwarded: %r" % req)
        else:
            self.assertEqual((ids, plans), ([key_id], [plan]), req)


# ---------------------------------------------------------------------------------------------
# The table, and the scenarios of several requests, on one gateway.


class TargetTableTests(HostileCase):

    def test_table(self):
        log_checks = []  # (row name, key id, expected path, cost) checked in the access log
        for row in TABLE:
            with self.subTest(row=row["name"]):
                checked = self._run_row(row)
                if checked:
                    log_checks.append(checked)
        # The access log says the same path and cost the limiter and the upstream saw. stdout
        # is flushed on a timer: one bounded wait for every line.
        ids = {c[1] for c in log_checks}
        lines = self.gateway.access_log_lines(lambda e: e.get("key_id") in ids, len(ids), timeout=5)
        by_id = {}
        for raw in lines:
            e = json.loads(raw)
            by_id.setdefault(e.get("key_id"), []).append(e)
        for name, key_id, path, cost in log_checks:
            with self.subTest(row=name, check="access_log"):
                entries = by_id.get(key_id, [])
                self.assertEqual(len(entries), 1, entries)
                self.assertEqual(entries[0].get("path"), path, entries[0])
                self.assertEqual(entries[0].get("cost"), cost, entries[0])
                self.assertEqual(entries[0].get("plan"), PLAN, entries[0])
                self.assertEqual(entries[0].get("decision"), "allowed", entries[0])

    def _run_row(self, row):
        ip = fresh_ip()
        key, key_id = None, None
        if row.get("key") is FRESH:
            key, key_id = fresh_key()
        elif row.get("key"):
            key = row["key"]
        sub = lambda v: v.replace("{ip}", ip).replace("{key}", key or "")  # noqa: E731
        method = row.get("method", "GET")
        if "raw" in row:
            data = row["raw"].replace(b"{ip}", ip.encode())
            method = data.split(b" ", 1)[0].decode("latin-1")
        else:
            headers = [h if isinstance(h, bytes) else (h[0], sub(h[1]))
                       for h in row.get("headers", ())]
            if row.get("xff", True):
                headers.append(("X-Forwarded-For", ip))
            if key is not None:
                kh = row.get("key_header", "Authorization")
                headers.append((kh, "Bearer " + key if kh == "Authorization" else key))
            data = request_bytes(method, row["target"], headers, row.get("body", b""),
                                 host=row.get("host", HOST), version=row.get("version", "HTTP/1.1"))
        mark = self.upstream.mark()
        resp, client = self.exchange(data, method=method)
        self.assertIsNotNone(resp, "the gateway closed the connection without answering %r" % data)

        expected = row["status"]
        expected = expected if isinstance(expected, (set, frozenset)) else {expected}
        self.assertIn(resp.status, expected, resp)
        code = row.get("code")
        if code is not None and resp.status >= 400 and method != "HEAD":  # HEAD: no body
            self.assertIn(resp.code, code if isinstance(code, set) else {code}, resp)
        if row.get("closed"):
            self.assertTrue(client.closed_within(2.0), "the connection stayed open after %r" % resp)
            time.sleep(0.05)  # anything smuggled would reach the upstream right after

        got = self.upstream.requests_since(mark)
        if TRACE:
            sys.stderr.write("\n  %-45s %s %-24s -> %s\n" % (
                row["name"], resp.status, resp.code or "", [q.line for q in got] or "-"))
        if not 200 <= resp.status < 300 or row.get("forwarded", True) is False:
            self.assertEqual(got, [], "a %d request reached the upstream" % resp.status)
            return None
        if row.get("may_answer") and not got:
            return None  # answered by the gateway itself (OPTIONS *)
        self.assertEqual(len(got), 1, got)
        req = got[0]
        if "line" in row:
            self.assertEqual(req.line, row["line"], req)
        if "line_re" in row:
            self.assertRegex(req.line, row["line_re"])
        # Identity.
        default_ident = True if row.get("bucket") == "key" else (False if key is None else None)
        ident = row.get("ident", default_ident)
        if ident is True:
            self.assertIdentityHeaders(req, key_id, PLAN)
        elif ident is False:
            self.assertIdentityHeaders(req)
        else:
            self.assertIdentityHeaders(req, allowed_ids=[key_id] if key_id else [])
        # One X-Forwarded-For: the client's list, then the peer.
        xffs = [v for k, v in req.headers if norm(k) == "x-forwarded-for"]
        default_xff = ("%s, %s" % (ip, PEER)) if row.get("xff", True) else PEER
        self.assertEqual(xffs, [sub(row.get("xff_up", default_xff))], req)
        # One Host.
        hosts = req.values("Host")
        self.assertEqual(len(hosts), 1, req)
        if "host_up" in row:
            self.assertEqual(hosts[0].lower(), row["host_up"].lower(), req)
        for name, value in row.get("up_headers", {}).items():
            self.assertEqual(req.values(name), [value], req)
        for name in row.get("up_absent", ()):
            self.assertEqual(req.values(name), [], req)
        if "body_up" in row:
            self.assertEqual(req.body, row["body_up"], req)
        # The bucket that paid, and how much.
        bucket, cost = row.get("bucket"), row.get("cost", 1)
        if bucket is not None and resp.status == 200:
            cap = KEY_CAP if bucket == "key" else ANON
            self.assertEqual(resp.header("RateLimit-Limit"), str(cap), resp)
            self.assertEqual(resp.header("RateLimit-Remaining"), str(cap - cost), resp)
        if key_id is not None and bucket == "key" and "line" in row:
            return (row["name"], key_id, row["line"].split(" ")[1].split("?")[0], cost)
        return None

    # Scenarios of several requests.

    def test_pipelined_requests_are_answered_in_order(self):
        ip = fresh_ip()
        h = [("X-Forwarded-For", ip)]
        c = RawClient(self.port)
        self.addCleanup(c.close)
        c.send(request_bytes("GET", "/public/p1", h) + request_bytes("GET", "/public/p2", h) +
               request_bytes("GET", "/public/p3", h))
        seen = []
        for _ in range(3):
            r = c.response()
            self.assertIsNotNone(r)
            self.assertEqual(r.status, 200, r)
            seen.append(json.loads(r.body)["seen"])
        self.assertEqual(seen, ["/public/p1", "/public/p2", "/public/p3"])

    def test_pipelined_limited_request_is_never_forwarded(self):
        ip = fresh_ip()
        mark = self.upstream.mark()
        c = RawClient(self.port)
        self.addCleanup(c.close)
        c.send(b"".join(request_bytes("GET", "/public/q%d" % i, [("X-Forwarded-For", ip)])
                        for i in range(ANON + 2)))
        statuses = []
        for i in range(ANON + 2):
            r = c.response()
            self.assertIsNotNone(r, "response %d" % i)
            statuses.append(r.status)
            if r.status == 200:
                self.assertEqual(json.loads(r.body)["seen"], "/public/q%d" % i)
        self.assertEqual(statuses, [200] * ANON + [429, 429])
        time.sleep(0.05)  # for an absence: a request forwarded by mistake would arrive by then
        self.assertEqual([q.target for q in self.upstream.requests_since(mark)],
                         ["/public/q%d" % i for i in range(ANON)])

    def test_forwarded_for_lines_are_one_list_walked_right_to_left(self):
        """A client's own X-Forwarded-For line, then the trusted proxy's: the client is the
        proxy's entry, whatever the first line says."""
        for spelling in ("X-Forwarded-For", "x-forwarded-for"):
            with self.subTest(second_line=spelling):
                client = fresh_ip()
                statuses = []
                for i in range(ANON + 1):
                    mark = self.upstream.mark()
                    first = "6.6.%d.%d" % (len(spelling) % 7, i + 1)  # a new lie every time
                    r = self.get("/public/x",
                                 headers=[("X-Forwarded-For", first), (spelling, client)])
                    statuses.append(r.status)
                    if r.status == 200:
                        [req] = self.upstream.requests_since(mark)
                        xffs = [v for k, v in req.headers if norm(k) == "x-forwarded-for"]
                        self.assertEqual(xffs, ["%s, %s, %s" % (first, client, PEER)], req)
                self.assertEqual(statuses, [200] * ANON + [429])

    def test_login_spellings_are_limited_per_ip_even_with_a_valid_key(self):
        """The login route (identity ip) whatever the spelling: ANON requests pass, the next is
        429, each with another valid key (a key's plan must not apply there)."""
        for target in ("/login", "//login", "/%6cogin", "/./login", "/login/", "/public/../login"):
            with self.subTest(target=target):
                ip = fresh_ip()
                statuses = []
                for _ in range(ANON + 1):
                    r = self.get(target, method="POST", key=fresh_key()[0], ip=ip)
                    statuses.append(r.status)
                    if r.status == 200:
                        self.assertEqual(r.header("RateLimit-Limit"), str(ANON), r)
                self.assertEqual(statuses, [200] * ANON + [429])


# ---------------------------------------------------------------------------------------------
# The decision listener: what describes the original request, and from whom it is believed.
#
# Rows: proxy ("nginx" | "traefik", the class), source (the peer), headers, key (FRESH or None),
# status, code; remaining (RateLimit-Remaining on a 200 with a fresh key).

DECISION_TABLE = [
    # nginx: X-Original-URI / X-Original-Method, believed from a trusted peer only.
    dict(name="nginx_untrusted_original_uri_ignored", proxy="nginx", source=UNTRUSTED_PEER,
         headers=[("X-Original-URI", "/public/page"), ("X-Original-Method", "GET")],
         status=401, code="missing_api_key"),
    dict(name="nginx_untrusted_login_ignored", proxy="nginx", source=UNTRUSTED_PEER,
         headers=[("X-Original-URI", "/login"), ("X-Original-Method", "POST")],
         status=401, code="missing_api_key"),
    dict(name="nginx_trusted_original_uri", proxy="nginx", source=PEER,
         headers=[("X-Original-URI", "/public/page"), ("X-Original-Method", "GET")], status=200),
    dict(name="nginx_trusted_dotdot", proxy="nginx", source=PEER,
         headers=[("X-Original-URI", "/public/../v1/items"), ("X-Original-Method", "GET")],
         status=401, code="missing_api_key"),
    dict(name="nginx_trusted_encoded_dotdot", proxy="nginx", source=PEER,
         headers=[("X-Original-URI", "/public/%2e%2e/x"), ("X-Original-Method", "GET")],
         status=401, code="missing_api_key"),
    dict(name="nginx_trusted_encoded_slash", proxy="nginx", source=PEER,
         headers=[("X-Original-URI", "/public/..%2f"), ("X-Original-Method", "GET")],
         status=400, code=BAD_TARGET),
    dict(name="nginx_trusted_fragment", proxy="nginx", source=PEER,
         headers=[("X-Original-URI", "/public/a#/../../v1/items"), ("X-Original-Method", "GET")],
         status=400, code=BAD_TARGET),
    dict(name="nginx_trusted_login_double_slash", proxy="nginx", source=PEER,
         headers=[("X-Original-URI", "//login"), ("X-Original-Method", "POST")], status=200),
    dict(name="nginx_trusted_export_cost", proxy="nginx", source=PEER, key=FRESH,
         headers=[("X-Original-URI", "/v1/export?pag%65s=5000"), ("X-Original-Method", "GET")],
         status=200, remaining=KEY_CAP - 100),
    dict(name="nginx_ignores_traefik_headers", proxy="nginx", source=PEER,
         headers=[("X-Forwarded-Uri", "/public/page"), ("X-Forwarded-Method", "GET")],
         status=401, code="missing_api_key"),
    # Traefik: X-Forwarded-Uri / X-Forwarded-Method only.
    dict(name="traefik_forwarded_uri", proxy="traefik", source=PEER,
         headers=[("X-Forwarded-Uri", "/public/page"), ("X-Forwarded-Method", "GET")], status=200),
    dict(name="traefik_ignores_original_uri", proxy="traefik", source=PEER,
         headers=[("X-Original-URI", "/public/page"), ("X-Original-Method", "GET")],
         status=401, code="missing_api_key"),
    dict(name="traefik_client_original_uri_beside_forwarded_uri", proxy="traefik", source=PEER,
         headers=[("X-Original-URI", "/public/page"), ("X-Forwarded-Uri", "/v1/items"),
                  ("X-Forwarded-Method", "GET")],
         status=401, code="missing_api_key"),
    dict(name="traefik_dotdot", proxy="traefik", source=PEER,
         headers=[("X-Forwarded-Uri", "/public/../v1/items"), ("X-Forwarded-Method", "GET")],
         status=401, code="missing_api_key"),
    dict(name="traefik_encoded_slash", proxy="traefik", source=PEER,
         headers=[("X-Forwarded-Uri", "/public/..%2f"), ("X-Forwarded-Method", "GET")],
         status=400, code=BAD_TARGET),
    dict(name="traefik_untrusted_ignored", proxy="traefik", source=UNTRUSTED_PEER,
         headers=[("X-Forwarded-Uri", "/public/page"), ("X-Forwarded-Method", "GET")],
         status=401, code="missing_api_key"),
    dict(name="traefik_export_cost", proxy="traefik", source=PEER, key=FRESH,
         headers=[("X-Forwarded-Uri", "/v1/export?pages=5000"), ("X-Forwarded-Method", "GET")],
         status=200, remaining=KEY_CAP - 100),
]


class _DecisionRows:
    """The decision table's rows for one proxy (a mixin: not a test class of its own)."""

    PROXY = None

    @classmethod
    def config(cls):
        return gateway_config(anon=1000)

    def test_decision_table(self):
        rows = [r for r in DECISION_TABLE if r["proxy"] == self.PROXY]
        self.assertTrue(rows)
        for row in rows:
            with self.subTest(row=row["name"]):
                headers = list(row["headers"])
                if row.get("key") is FRESH:
                    headers.append(("Authorization", "Bearer " + fresh_key()[0]))
                # The check's own target is keyed (the default route): it must not matter
                # unless the headers describing the original request are ignored.
                data = request_bytes("GET", "/.tollgate/decide", headers)
                mark = self.upstream.mark()
                r, _ = self.exchange(data, source=row["source"], port=self.decision_port)
                self.assertIsNotNone(r)
                self.assertEqual(r.status, row["status"], r)
                if "code" in row:
                    self.assertEqual(r.code, row["code"], r)
                if "remaining" in row:
                    self.assertEqual(r.header("RateLimit-Remaining"), str(row["remaining"]), r)
                self.assertEqual(self.upstream.requests_since(mark), [])


class DecisionNginxTests(_DecisionRows, HostileCase):
    PROXY = "nginx"
    DECISION = {"proxy": "nginx"}


class DecisionTraefikTests(_DecisionRows, HostileCase):
    PROXY = "traefik"
    DECISION = {"proxy": "traefik"}


# ---------------------------------------------------------------------------------------------
# The upstream pool against upstreams that misbehave as real ones do. One I/O thread, so that
# every request shares the one pool.


def one_thread_config(**upstream):
    c = gateway_config(anon=1000)
    c["server"] = dict(c["server"], threads=1)
    c["upstream"] = dict({"timeout_ms": 3000}, **upstream)
    return c


class _IgnoresGetBodies(HostileCase):
    """A GET with a body to a server that reads no GET body: the server answers the GET, then
    the body (itself a request, GET /secret) as the next request, 30 ms later. That second answer
    arrives on a connection the gateway holds idle: it must never be given to another client."""

    BEHAVIOUR = "ignores_get_bodies"
    UPSTREAM_ARGS = {"get_body_delay_ms": 30}
    HIDDEN = b"GET /secret HTTP/1.1\r\nHost: x\r\n\r\n"

    @classmethod
    def config(cls):
        return one_thread_config()

    def _round(self, i, wait):
        r = self.get("/public/a%d" % i, body=self.HIDDEN, ip=fresh_ip())
        self.assertNotIn(b"/secret", r.body, r)
        if wait:
            # Until the upstream has written its answer to the hidden request, and a moment for
            # it to reach the gateway.
            n = sum(1 for q in self.upstream.requests() if q.path == "/secret")
            self.assertTrue(self.upstream.wait_for(
                lambda up: sum(1 for q in up.requests() if q.path == "/secret" and q.answered) >= n,
                timeout=5), "the upstream never answered the hidden request: nothing tested")
            time.sleep(0.05)
        r = self.get("/public/b%d" % i, ip=fresh_ip())
        self.assertEqual(r.status, 200, r)
        self.assertNotIn(b"/secret", r.body, r)
        self.assertEqual(json.loads(r.body)["seen"], "/public/b%d" % i, r)


class UpstreamIgnoresGetBodiesTests(_IgnoresGetBodies):

    def test_leftover_response_never_reaches_another_client(self):
        """The pool rule: the leftover answer has arrived before the next client comes, so the
        idle connection is readable: it is closed, never reused."""
        for i in range(4):
            with self.subTest(round=i):
                self._round(i, wait=True)


class UpstreamIgnoresGetBodiesLateTests(_IgnoresGetBodies):
    """Its own gateway and upstream: a failure here leaves answers out of step on the pool."""

    def test_leftover_response_arriving_late_never_reaches_another_client(self):
        """The next client comes at once, before the leftover answer arrives: the idle
        connection is not readable yet, so the pool rule alone cannot see it. Passes only if the
        gateway also never pools an upstream connection after forwarding a body the server may
        not have read (a GET's, a HEAD's), or does not forward such bodies."""
        for i in range(4):
            with self.subTest(round=i):
                self._round(100 + i, wait=False)


class UpstreamIdleCloseTests(HostileCase):
    """The upstream closes a keep-alive connection after 200 ms idle (Node's keepAliveTimeout,
    shortened). A request after that must go on a new connection, body or no body: never 502."""

    UPSTREAM_ARGS = {"idle_close_ms": 200}

    @classmethod
    def config(cls):
        return one_thread_config()

    ROWS = [
        ("post_with_body", "POST", b"x" * 10, False),
        ("post_chunked_body", "POST", b"y" * 7, True),
        ("put_with_body", "PUT", b"z" * 3, False),
        ("patch_with_body", "PATCH", b"p" * 5, False),
        ("post_without_body", "POST", b"", False),
        ("get", "GET", b"", False),
    ]

    def test_request_after_the_upstream_closed_an_idle_connection(self):
        for n, (name, method, body, chunked) in enumerate(self.ROWS):
            with self.subTest(row=name):
                # A pooled connection, which the upstream then closes for being idle.
                mark = self.upstream.mark()
                self.assertEqual(self.get("/public/warm-%d" % n, ip=fresh_ip()).status, 200)
                [warm] = self.upstream.requests_since(mark)
                [conn] = [c for c in self.upstream.connections() if c.id == warm.conn_id]
                # 200 ms idle, then closed.
                self.assertTrue(self.upstream.wait_for(lambda up: conn.closed_by is not None, 5))
                self.assertEqual(conn.closed_by, "upstream-idle", "nothing tested")
                time.sleep(0.05)  # for the FIN to reach the gateway
                path = "/public/%s-%d" % (name, n)
                h = [("X-Forwarded-For", fresh_ip())]
                if chunked:
                    data = (request_bytes(method, path, h + [("Transfer-Encoding", "chunked")]) +
                            b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
                else:
                    data = request_bytes(method, path, h + ([] if body or method == "GET"
                                                            else [("Content-Length", "0")]), body)
                mark = self.upstream.mark()
                r, _ = self.exchange(data, method=method)
                self.assertIsNotNone(r)
                self.assertEqual(r.status, 200, r)
                got = [q for q in self.upstream.requests_since(mark) if q.path == path]
                self.assertEqual(len(got), 1, got)
                self.assertEqual(got[0].body, body, got[0])


class UpstreamResetTests(HostileCase):
    """The upstream reads a POST (or DELETE, or a path holding /reset/) whole, executes it, and
    resets the connection without answering. A non-idempotent request is never sent twice."""

    BEHAVIOUR = "reset_after_reading_post"

    @classmethod
    def config(cls):
        return one_thread_config()

    # (name, method, path, body, most executions allowed)
    ROWS = [
        ("post_without_body", "POST", "/public/r-post", b"", 1),
        ("post_with_body", "POST", "/public/r-post-body", b"order=1", 1),
        ("patch", "PATCH", "/public/reset/patch", b"p", 1),
        ("post_to_login", "POST", "/login", b"user=a&password=b", 1),
        ("delete_idempotent", "DELETE", "/public/r-delete", b"", 2),
        ("put_idempotent", "PUT", "/public/reset/put", b"v", 2),
        ("get_idempotent", "GET", "/public/reset/get", b"", 2),
    ]

    def test_reset_after_the_request_is_read(self):
        for name, method, path, body, most in self.ROWS:
            with self.subTest(row=name):
                # A pooled connection first: the request goes out on a reused one, where a
                # gateway is most tempted to retry.
                self.assertEqual(self.get("/public/warm", ip=fresh_ip()).status, 200)
                h = [("X-Forwarded-For", fresh_ip())]
                if not body and method in ("POST", "DELETE", "PATCH", "PUT"):
                    h.append(("Content-Length", "0"))
                r, _ = self.exchange(request_bytes(method, path, h, body), method=method)
                self.assertIsNotNone(r)
                self.assertIn(r.status, (502, 503), r)
                self.assertEqual(r.code, "upstream_unavailable", r)
                time.sleep(0.05)  # for an absence: a retry the gateway should not make
                n = self.upstream.executions(method, path)
                self.assertGreaterEqual(n, 1)
                self.assertLessEqual(n, most, "%s %s executed %d times" % (method, path, n))


class UpstreamPoolQueueTests(HostileCase):
    """Every pooled connection busy: requests wait for one (bounded), they do not fail."""

    BEHAVIOUR = "hold"

    @classmethod
    def config(cls):
        return one_thread_config(max_connections=2)

    def _send_all(self, n, results):
        def one(i):
            try:
                r = self.get("/public/h%d" % i, ip=fresh_ip())
                results[i] = (r.status, r.code)
            except Exception as e:  # recorded, asserted below
                results[i] = repr(e)
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        return threads

    def test_requests_queue_while_every_connection_is_busy(self):
        self.upstream.hold_again()
        results = {}
        threads = self._send_all(5, results)
        try:
            self.assertTrue(self.upstream.wait_held(2, timeout=5), "the upstream got < 2 requests")
            time.sleep(0.3)  # for an absence: nothing is answered while both connections are held
            self.assertEqual(results, {}, "answered while every connection was busy")
            self.assertLessEqual(self.upstream.held, 2)
        finally:
            self.upstream.release_all()
            for t in threads:
                t.join(timeout=10)
        self.assertEqual(sorted(results.values(), key=str), [(200, None)] * 5, results)
        self.assertLessEqual(len(self.upstream.connections()), 2)

    def test_queue_wait_is_bounded(self):
        """Past upstream.queue_timeout_ms (default 1000), 503 upstream_busy."""
        self.upstream.hold_again()
        results = {}
        threads = self._send_all(3, results)
        try:
            self.assertTrue(self.upstream.wait_held(2, timeout=5))
            for _ in harness.deadline_loop(4.0, step=0.05):
                if results:
                    break
            self.assertEqual(list(results.values()), [(503, "upstream_busy")], results)
        finally:
            self.upstream.release_all()
            for t in threads:
                t.join(timeout=10)
        self.assertEqual(sorted(results.values(), key=str),
                         sorted([(200, None), (200, None), (503, "upstream_busy")], key=str),
                         results)


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
