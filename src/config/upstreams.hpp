// The upstream sections: `upstream:` (one upstream, the default group) and `upstreams:` (named
// groups of endpoints, issue 33), and the group each route names. Private to the config loader.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include <tollgate/config/config.hpp>

namespace tollgate::config::internal {

// `upstream` and `upstreams` of `root` into config.upstream and config.upstreams (the default
// group first); fails naming the field.
void ParseUpstreams(const YAML::Node& root, const std::string& base_dir, Config& config);

// Each route's `upstream` name as an index of config.upstreams; an unknown name fails at
// "routes[i].upstream".
void ResolveRouteUpstreams(Config& config);

}  // namespace tollgate::config::internal
