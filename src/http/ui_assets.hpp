// The live page's files (GET /admin/ui, issue 23): src/http/ui/*, embedded in the binary at
// build time (cmake/embed_ui.cmake writes their bytes into ui_assets.cpp). No HTTP library.
#pragma once

#include <string_view>

namespace tollgate::http {

struct UiAsset {
  std::string_view path;          // "/admin/ui", "/admin/ui/app.js", ...
  std::string_view content_type;  // with its charset
  std::string_view body;
};

// The headers sent with each: the page loads its script and style from the admin listener only
// and fetches only from it; nothing may frame it. Data reaches the DOM as text only (app.js), so
// an injected key id or account name could not run even if the policy allowed inline script.
inline constexpr std::string_view kUiHeaders =
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "Referrer-Policy: no-referrer\r\n"
    "Cache-Control: no-cache\r\n";

// The asset served at `path`, or null. Thread-safe (constant data).
const UiAsset* FindUiAsset(std::string_view path);

}  // namespace tollgate::http
