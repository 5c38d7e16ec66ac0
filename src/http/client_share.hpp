// One worker's count of the upstream connections and queue places each client holds, for
// upstream.max_client_share_percent (issue 31: 300 clients of one address that never read their
// responses, or trickled their bodies, held every connection of the pool). A client is counted
// by its address and, when it presented one, by its key: many addresses with one key, or many
// keys from one address, are each one client.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tollgate::http {

// Not thread-safe; owned by one worker, like the pool it counts for.
class ClientShares {
 public:
  struct Use {
    size_t held = 0;    // upstream connections
    size_t queued = 0;  // places in the pool's queue
    size_t claims = 0;  // requests counted here (the entry is dropped at 0)
  };

  // One request's place in the counts, for as long as the request lives; empty (counting
  // nothing, refused nothing) when default-constructed. Moves are not needed: it lives in the
  // forwarding coroutine's frame.
  class Claim {
   public:
    Claim() = default;
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    ~Claim() { Reset(); }

    // Whether every client of the claim holds fewer than `most` connections (places).
    bool MayHold(size_t most) const { return Below(&Use::held, most); }
    bool MayQueue(size_t most) const { return Below(&Use::queued, most); }
    // Counts (stops counting) a connection held, or a place in the queue. Each is held once.
    void Hold() { Set(holding_, &Use::held, true); }
    void Unhold() { Set(holding_, &Use::held, false); }
    void Queue() { Set(queueing_, &Use::queued, true); }
    void Unqueue() { Set(queueing_, &Use::queued, false); }

    // Ends the claim (what it holds is given back).
    void Reset() {
      Unhold();
      Unqueue();
      for (auto& [key, use] : uses_) {
        if (use && --use->claims == 0) owner_->uses_.erase(key);
        use = nullptr;
      }
      owner_ = nullptr;
    }

   private:
    friend class ClientShares;
    bool Below(size_t Use::*count, size_t most) const {
      for (const auto& [key, use] : uses_) {
        if (use && use->*count >= most) return false;
      }
      return true;
    }
    void Set(bool& flag, size_t Use::*count, bool on) {
      if (flag == on) return;
      flag = on;
      for (auto& [key, use] : uses_) {
        if (use) use->*count += on ? 1 : static_cast<size_t>(-1);
      }
    }

    ClientShares* owner_ = nullptr;
    std::array<std::pair<std::string, Use*>, 2> uses_{};
    bool holding_ = false;
    bool queueing_ = false;
  };

  // Starts `claim` (ending what it held before) for the client at `address` and with the key
  // `key_id`; either may be empty (not counted).
  void Begin(Claim& claim, std::string_view address, std::string_view key_id) {
    claim.Reset();
    claim.owner_ = this;
    Add(claim.uses_[0], 'a', address);
    Add(claim.uses_[1], 'k', key_id);
  }

  size_t size() const { return uses_.size(); }

 private:
  void Add(std::pair<std::string, Use*>& slot, char kind, std::string_view name) {
    if (name.empty()) return;
    slot.first.assign(1, kind).append(name);  // an address and a key id never share a name
    slot.second = &uses_[slot.first];         // node-based: the pointer outlives rehashes
    ++slot.second->claims;
  }

  std::unordered_map<std::string, Use> uses_;
};

}  // namespace tollgate::http
