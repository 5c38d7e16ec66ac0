// Reading YAML nodes into typed values, each failure naming the field path
// ("plans.free.limits[0].capacity: must be >= 1, got 0"). Private to the config loader.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tollgate/util/name_table.hpp>

namespace tollgate::config::internal {

// Thrown inside the loader only (start-up and reload, never the request path); ParseConfig and
// ParseOverrides turn it into an error value.
struct FieldError {
  std::string path;
  std::string message;
  int line = 0;  // 1-based line of the field in its file; 0: unknown yet (LineOf finds it)
};

[[noreturn]] void Fail(const std::string& path, const std::string& message);
// Fail, at a known line (1-based).
[[noreturn]] void FailAt(const std::string& path, int line, const std::string& message);

// The line (1-based) of the node at `path` ("plans.free.limits[0].capacity") under `root`, or
// of its deepest ancestor found (a missing field: the mapping that lacks it); 0 when not even
// the first step is found. Best effort: a map key holding '.' or '[' is not followed.
int LineOf(const YAML::Node& root, const std::string& path);

// Refuses a mapping key given twice anywhere under `n` (yaml-cpp keeps the first and ignores
// the rest: a second `mode: shadow` did nothing), naming the second one's path and line.
// Anchors and aliases are walked once.
void RefuseDuplicateKeys(const YAML::Node& n, const std::string& path);

// Fails with an error of the form "field: message" (core::Limit::Create, KeyWindowLimit) moved
// under `path`: "path.field: message". An error without "field: " fails at `path` itself.
[[noreturn]] void FailUnder(const std::string& path, const std::string& error);

// "path: message", or just the message for the root.
std::string ErrorText(const FieldError& e);

// "a.b" (just "b" under the root) and "a[3]".
std::string Join(const std::string& path, const std::string& key);
std::string Index(const std::string& path, size_t i);

void RequireMap(const YAML::Node& n, const std::string& path);

// Refuses unknown keys: a misspelt field must not be silently ignored.
void OnlyKeys(const YAML::Node& n, const std::string& path, std::set<std::string> allowed);

// A scalar as written. `${` is refused in it: only the fields read with Expanded or Secret
// expand environment variables, and a `${NAME}` elsewhere would be taken literally.
std::string Str(const YAML::Node& n, const std::string& path);

// A string where every `${NAME}` is the environment variable NAME (addresses, URLs, file
// paths). Errors name the variable, never a value.
std::string Expanded(const YAML::Node& n, const std::string& path);

// A string that may hold a secret (a URL with a password): Expanded, and then `file:PATH` is the
// file's content (its last line break dropped). Errors name the file or the variable, never a
// value.
std::string Secret(const YAML::Node& n, const std::string& path);

// A listen address, Expanded: host:port, [v6]:port or :port, the port decimal 0 to 65535 (0:
// any free port, for tests).
std::string ListenAddress(const YAML::Node& n, const std::string& path);

// A name that reaches HTTP fields (key ids, accounts, plan and limit names): a CR/LF in one
// would inject header lines into every upstream request of that key.
std::string Name(const YAML::Node& n, const std::string& path);

// RFC 9110 token: a header or method name.
bool IsToken(std::string_view s);

// A decimal integer in [min, max].
int64_t Int(const YAML::Node& n, const std::string& path, int64_t min, int64_t max);

// true or false, spelt so.
bool Bool(const YAML::Node& n, const std::string& path);

std::vector<std::string> StrList(const YAML::Node& n, const std::string& path);

// One of `values` by its name; anything else fails as "must be <expected>, got '<text>'".
template <class E>
E ParseEnum(const YAML::Node& n, const std::string& path,
            std::initializer_list<std::pair<const char*, E>> values, const char* expected) {
  const std::string s = Str(n, path);
  for (const auto& [name, value] : values) {
    if (s == name) return value;
  }
  Fail(path, std::string("must be ") + expected + ", got '" + s + "'");
}

// One of the values of `table` (util/name_table.hpp) by its name; anything else fails as
// "must be <the table's names>, got '<text>'".
template <class E, size_t N>
E ParseEnum(const YAML::Node& n, const std::string& path, const util::NameTable<E, N>& table) {
  const std::string s = Str(n, path);
  if (const std::optional<E> value = util::ValueOf(table, s)) return *value;
  Fail(path, "must be " + util::NamesOf(table) + ", got '" + s + "'");
}

// Sets `out` from the integer field `key` of `parent`, when present.
template <class T>
void Set(const YAML::Node& parent, const char* key, const std::string& path, T& out, int64_t min,
         int64_t max) {
  if (const YAML::Node n = parent[key]) out = static_cast<T>(Int(n, Join(path, key), min, max));
}

}  // namespace tollgate::config::internal
