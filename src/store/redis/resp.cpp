#include "store/redis/resp.hpp"

namespace tollgate::store::redis {

void AppendCommand(std::string& out, const std::vector<std::string>& args) {
  AppendRequest(out, args);
}

void AppendCommand(std::string& out, std::initializer_list<std::string_view> args) {
  AppendRequest(out, args);
}

}  // namespace tollgate::store::redis
