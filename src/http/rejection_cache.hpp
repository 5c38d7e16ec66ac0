// A worker's last rejection, rendered once and sent again while it says the same: a client past
// its limit is told the same for a while, often many times a second, and the same numbers make
// the same bytes.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace tollgate::http {

// Not thread-safe; owned by one worker. Holds one response: the last one rendered.
class RejectionCache {
 public:
  struct Response {
    std::string_view bytes;  // valid until the next Get()
    int status = 0;
  };

  // The response to a rejection made of `facts` (every value its bytes are made of:
  // contract::AppendRejectionFacts, and the connection's keep-alive and HTTP version): the last
  // one when it had the same facts, else the one `render(out)` renders into `out` (the cache's
  // buffer, its old response in it) and whose status it returns. On a miss the cache takes
  // `facts` and leaves its old facts in it (its buffer is reused: no allocation).
  template <class Render>
  Response Get(std::string& facts, Render&& render) {
    if (facts != facts_) {
      facts_.swap(facts);
      status_ = std::forward<Render>(render)(response_);
    }
    return {response_, status_};
  }

 private:
  std::string facts_;
  std::string response_;
  int status_ = 0;
};

}  // namespace tollgate::http
