// Store::Apply() for tests: waits for the completion, whichever thread runs it.
#pragma once

#include <future>
#include <span>

#include <tollgate/store/store.hpp>

namespace tollgate::testing {

inline store::ApplyResult ApplySync(store::Store& store, const store::Batch& batch,
                                    std::span<core::Decision> out) {
  std::promise<store::ApplyResult> p;
  auto f = p.get_future();
  store.Apply(batch, out, [&p](store::ApplyResult&& r) { p.set_value(std::move(r)); });
  return f.get();
}

}  // namespace tollgate::testing
