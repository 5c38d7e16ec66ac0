// The two store stacks behind app::Services: memory (memory_stack.cpp) and Redis
// (redis_stack.cpp).
#pragma once

#include <memory>

#include "app/services.hpp"

namespace tollgate::app {

std::unique_ptr<Services> OpenMemoryStack(const config::Config& config);
std::unique_ptr<Services> OpenRedisStack(const config::Config& config);

}  // namespace tollgate::app
