// Reading routes: path patterns, methods, cost, identity, fail mode. Private to the config
// loader; failures throw FieldError.
#pragma once

#include <yaml-cpp/yaml.h>

#include <tollgate/config/config.hpp>
#include <vector>

namespace tollgate::config::internal {

// The `routes` list, in file order (first match wins). Names are unique. `exact_match`: the
// default of each route's `match` (server.route_match).
std::vector<RouteConfig> ParseRoutes(const YAML::Node& routes, bool exact_match);

}  // namespace tollgate::config::internal
