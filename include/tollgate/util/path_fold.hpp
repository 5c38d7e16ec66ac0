// The folded form of a canonical path: the spellings that common upstreams route to one handler
// written as one string, so that a route matches every spelling its upstream serves (issue 31:
// Express, ASP.NET and IIS route "/LOGIN" to the "/login" handler). A pure function.
#pragma once

#include <string>
#include <string_view>

namespace tollgate::util {

// Whether FoldPath(path) could differ from `path`: an ASCII capital, a '%', a ';', or a segment
// that ends in '.'. Cheap: one pass, no writes; false for the common lower-case path.
bool PathNeedsFold(std::string_view path);

// Writes the folded form of `path` (canonical: util/target.hpp) into `out` (cleared first). Each
// segment, in this order:
//   - ';' and what follows it in the segment dropped (Tomcat's and Spring's path parameters);
//   - %XX of a visible ASCII byte other than '/', '\', '%', ';', '?' and '#' decoded (servers
//     that decode before routing), and the UTF-8 forms that Unicode normalisation (NFKC) or a
//     case-insensitive comparison turns into an ASCII letter or digit read as that character:
//     full-width U+FF01-U+FF5E, U+017F (long s), U+212A (Kelvin sign), U+0131 (dotless i),
//     U+0130 (capital I with dot: Java lower-cases it to 'i');
//   - ASCII letters lower-cased (case-insensitive routers);
//   - trailing '.' and ' ' removed (Windows and IIS: "/login." is "/login"); a segment left
//     empty is dropped.
// A trailing slash stays as it came. "*" and paths not starting with '/' are copied as they are.
void FoldPath(std::string_view path, std::string& out);

// Whether `rest`, what follows an exact route's last segment, is a format suffix that routers
// take as the same route (Rails' "(.:format)", Spring's suffix match): '.' and one or more
// characters other than '/', '.' and '?', and nothing after them.
bool IsFormatSuffix(std::string_view rest);

}  // namespace tollgate::util
