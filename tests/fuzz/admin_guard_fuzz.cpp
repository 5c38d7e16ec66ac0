// libFuzzer target: AdminGuard (src/http/admin_guard.cpp) on arbitrary Host values and
// Authorization fields. A Host it allows must name the listener: after its port and one
// trailing dot, `localhost` or a configured name in some case, or an address that inet_pton
// reads; a token it accepts must be the configured one (see tests/fuzz/run.sh).
#include <tollgate/http/admin_guard.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include <arpa/inet.h>

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsAddress(const std::string& s, bool v6) {
  unsigned char buf[16];
  return inet_pton(v6 ? AF_INET6 : AF_INET, s.c_str(), buf) == 1;
}

// What an allowed Host may be: its host part names the listener.
bool NamesTheListener(std::string_view host) {
  std::string_view name;
  bool v6 = false;
  if (host.starts_with('[')) {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    name = host.substr(1, close - 1);
    v6 = true;
  } else {
    name = host.substr(0, host.find(':'));
  }
  if (IsAddress(std::string(name), v6)) return true;
  if (v6) return false;
  if (name.size() > 1 && name.back() == '.') name.remove_suffix(1);
  const std::string key = Lower(name);
  return key == "localhost" || key == "admin.example";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  static const tollgate::http::AdminGuard guard("127.0.0.1:9090", {"admin.example"},
                                                "s3cret-token");
  if (guard.HostAllowed(input)) Check(NamesTheListener(input));

  tollgate::http::RequestHead head;
  head.method = "POST";
  head.fields.push_back({"Authorization", input});
  if (guard.CheckToken(head) == tollgate::http::AdminGuard::Token::kOk) {
    std::string_view rest = input;
    Check(rest.size() > 7 && Lower(rest.substr(0, 7)) == "bearer ");
    rest.remove_prefix(7);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.remove_suffix(1);
    Check(rest == "s3cret-token");
  }
  return 0;
}
