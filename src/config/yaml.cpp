#include "config/yaml.hpp"

#include <tollgate/util/ascii.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <set>
#include <tollgate/config/config.hpp>
#include <tollgate/util/host_port.hpp>
#include <utility>

#include "config/files.hpp"

namespace tollgate::config::internal {

void Fail(const std::string& path, const std::string& message) { throw FieldError{path, message}; }

void FailAt(const std::string& path, int line, const std::string& message) {
  throw FieldError{path, message, line};
}

int LineOf(const YAML::Node& root, const std::string& path) {
  if (!root || path.empty()) return 0;
  YAML::Node node;
  node.reset(root);  // reset, not `=`: assigning a node writes into the one it refers to
  int line = 0;
  size_t i = 0;
  while (i < path.size()) {
    YAML::Node next;
    if (path[i] == '[') {
      const size_t close = path.find(']', i);
      if (close == std::string::npos || !node.IsSequence()) break;
      size_t index = 0;
      const auto [p, ec] = std::from_chars(path.data() + i + 1, path.data() + close, index);
      if (ec != std::errc() || p != path.data() + close || index >= node.size()) break;
      next.reset(node[index]);
      i = close + 1;
    } else {
      if (path[i] == '.') ++i;
      const size_t end = std::min(path.find('.', i), path.find('[', i));
      const std::string key = path.substr(i, end == std::string::npos ? end : end - i);
      if (!node.IsMap()) break;
      const YAML::Node& const_node = node;  // const: operator[] must not add the key
      const YAML::Node child = const_node[key];
      if (!child) break;
      next.reset(child);
      i = end == std::string::npos ? path.size() : end;
    }
    node.reset(next);
    if (node.Mark().line >= 0) line = node.Mark().line + 1;
  }
  return line;
}

namespace {

void RefuseDuplicates(const YAML::Node& n, const std::string& path,
                      std::set<std::pair<int, int>>& walked) {
  if (!n.IsMap() && !n.IsSequence()) return;
  // Aliases are the node they name: each collection once (a YAML bomb stays linear).
  if (!walked.insert({n.Mark().pos, static_cast<int>(n.Type())}).second) return;
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) RefuseDuplicates(n[i], Index(path, i), walked);
    return;
  }
  std::map<std::string, int> lines;  // key -> its line
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) continue;  // refused as "must be a string" where it is read
    const std::string key = kv.first.Scalar();
    const int line = kv.first.Mark().line + 1;
    const auto [it, added] = lines.emplace(key, line);
    if (!added) {
      FailAt(Join(path, key), line,
             "given twice (first at line " + std::to_string(it->second) +
                 "): YAML keeps one of them, so remove the other");
    }
    RefuseDuplicates(kv.second, Join(path, key), walked);
  }
}

}  // namespace

void RefuseDuplicateKeys(const YAML::Node& n, const std::string& path) {
  std::set<std::pair<int, int>> walked;
  if (n) RefuseDuplicates(n, path, walked);
}

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

std::string Expanded(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) Fail(path, "must be a string");
  const std::string text = n.Scalar();
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
  return s;
}

std::string Secret(const YAML::Node& n, const std::string& path) {
  std::string s = Expanded(n, path);
  if (s.rfind("file:", 0) != 0) return s;
  // file:PATH (PATH may come from the environment: file:${CREDENTIALS_DIRECTORY}/redis-url).
  const std::string text = n.Scalar();
  auto content = ReadRegularFile(s.substr(5));
  if (!content) Fail(path, "cannot read the file of '" + text + "': " + content.error());
  std::string value = std::move(content).value();
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  if (value.empty()) Fail(path, "the file of '" + text + "' is empty");
  return value;
}

std::string ListenAddress(const YAML::Node& n, const std::string& path) {
  const std::string s = Expanded(n, path);
  const auto hp = util::SplitHostPort(s);
  if (!hp) Fail(path, "must be host:port, got '" + s + "'");
  const std::string& port = hp->port;
  int value = -1;
  const auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      ec != std::errc() || p != port.data() + port.size() || value > 65535) {
    Fail(path, "the port must be a number from 1 to 65535 (0: any free one), got '" + port + "'");
  }
  return s;
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
  std::string s = n.Scalar();
  // Issue 31: `${NAME}` is expanded only where docs/configuration.md ("Environment variables")
  // says; elsewhere it would have been taken as written.
  if (s.find("${") != std::string::npos) {
    Fail(path,
         "'${' is not expanded in this field (environment variables work in addresses, URLs, "
         "file paths and keys: docs/configuration.md, \"Environment variables\")");
  }
  return s;
}

std::string Name(const YAML::Node& n, const std::string& path) {
  std::string s = Str(n, path);
  if (!IsFieldSafe(s)) Fail(path, "must not contain control characters (CR, LF, NUL, ...)");
  return s;
}

bool IsToken(std::string_view s) { return util::IsToken(s); }

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
