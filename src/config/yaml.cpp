#include "config/yaml.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tollgate/config/config.hpp>

namespace tollgate::config::internal {

void Fail(const std::string& path, const std::string& message) { throw FieldError{path, message}; }

void FailUnder(const std::string& path, const std::string& error) {
  const size_t colon = error.find(": ");
  if (colon == std::string::npos) Fail(path, error);
  Fail(Join(path, error.substr(0, colon)), error.substr(colon + 2));
}

std::string ErrorText(const FieldError& e) {
  return e.path.empty() ? e.message : e.path + ": " + e.message;
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

void RequireMap(const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) Fail(path, "must be a mapping");
}

std::string Secret(const YAML::Node& n, const std::string& path) {
  const std::string text = Str(n, path);
  std::string s;  // every ${NAME} replaced
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "${") != 0) {
      s += text[i++];
      continue;
    }
    const size_t end = text.find('}', i);
    if (end == std::string::npos) Fail(path, "'${' without its '}'");
    const std::string name = text.substr(i + 2, end - i - 2);
    const bool valid = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                       std::all_of(name.begin(), name.end(),
                                   [](unsigned char c) { return std::isalnum(c) || c == '_'; });
    if (!valid) Fail(path, "'${" + name + "}' does not name an environment variable");
    const char* value = std::getenv(name.c_str());
    if (!value) Fail(path, "the environment variable " + name + " is not set");
    s += value;
    i = end + 1;
  }
  if (s.rfind("file:", 0) != 0) return s;
  // file:PATH (PATH may come from the environment: file:${CREDENTIALS_DIRECTORY}/redis-url).
  const std::string file = s.substr(5);
  std::ifstream in(file);
  if (file.empty() || !in) Fail(path, "cannot read the file of '" + text + "'");
  std::stringstream content;
  content << in.rdbuf();
  std::string value = content.str();
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  if (value.empty()) Fail(path, "the file of '" + text + "' is empty");
  return value;
}

void OnlyKeys(const YAML::Node& n, const std::string& path, std::set<std::string> allowed) {
  RequireMap(n, path);
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    if (!allowed.count(k)) Fail(Join(path, k), "unknown field");
  }
}

std::string Str(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) Fail(path, "must be a string");
  return n.as<std::string>();
}

std::string Name(const YAML::Node& n, const std::string& path) {
  std::string s = Str(n, path);
  if (!IsFieldSafe(s)) Fail(path, "must not contain control characters (CR, LF, NUL, ...)");
  return s;
}

bool IsToken(std::string_view s) {
  static constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  if (s.empty()) return false;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (!std::isalnum(c) && kSpecials.find(ch) == std::string_view::npos) return false;
  }
  return true;
}

int64_t Int(const YAML::Node& n, const std::string& path, int64_t min, int64_t max) {
  if (!n.IsScalar()) Fail(path, "must be an integer");
  const std::string s = n.as<std::string>();
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) Fail(path, "out of range: " + s);
  if (ec != std::errc() || p != s.data() + s.size())
    Fail(path, "must be an integer, got '" + s + "'");
  if (v < min) Fail(path, "must be >= " + std::to_string(min) + ", got " + s);
  if (v > max) Fail(path, "must be <= " + std::to_string(max) + ", got " + s);
  return v;
}

bool Bool(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) Fail(path, "must be true or false");
  const std::string s = n.as<std::string>();
  if (s == "true") return true;
  if (s == "false") return false;
  Fail(path, "must be true or false, got '" + s + "'");
}

std::vector<std::string> StrList(const YAML::Node& n, const std::string& path) {
  if (!n.IsSequence()) Fail(path, "must be a list");
  std::vector<std::string> out;
  for (size_t i = 0; i < n.size(); ++i) out.push_back(Str(n[i], Index(path, i)));
  return out;
}

}  // namespace tollgate::config::internal
