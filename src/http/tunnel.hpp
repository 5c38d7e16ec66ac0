// An upgraded connection's relay (issue 33): once the upstream answered 101, the bytes of each
// side are written to the other as they come, until both sides closed, one failed, no byte moved
// either way for the idle timeout (server.upgrade_idle_timeout_ms), or the drain ends. The
// tunnel knows nothing of the protocol it carries (WebSocket frames are not parsed).
#pragma once

#include <atomic>
#include <cstdint>

#include <boost/asio/awaitable.hpp>

#include "conn.hpp"

namespace tollgate::http {

class Tunnel;

// A worker's open tunnels, closed together at the end of the drain. Not thread-safe: one
// worker's, used on its thread.
class Tunnels {
 public:
  // Ends every open tunnel (Tunnel::End::kDrain): their operations are cancelled.
  void CloseAll();
  size_t CountApprox() const { return count_.load(std::memory_order_relaxed); }

 private:
  friend class Tunnel;
  Tunnel* head_ = nullptr;
  std::atomic<size_t> count_{0};
};

// Not thread-safe; lives in the frame of the request that upgraded, on its worker's thread.
//
// How a side's close is relayed: an end of stream from one side (a FIN, or TLS's close_notify)
// is passed on as TCP's half-close (shutdown of the write direction) to a plaintext other side,
// whose bytes keep flowing back until it closes too. A TLS side cannot be half-closed without
// TLS's close_notify, which many TLS stacks read as the end of the whole connection: there the
// tunnel ends, and both connections are closed. Any other failure (a reset, an error) ends the
// tunnel at once. A TLS side gets close_notify when the tunnel ends (one try, never waited for).
class Tunnel {
 public:
  // Why the tunnel ended: the side that closed first, the idle timeout or the drain.
  enum class End { kClient, kUpstream, kIdleTimeout, kDrain };
  struct Counters {
    std::atomic<uint64_t>& to_upstream;  // bytes relayed from the client
    std::atomic<uint64_t>& to_client;
  };

  // `client_buffer` and `upstream_buffer`: bytes already read from each side past the heads
  // (relayed first). They must outlive the tunnel.
  Tunnel(Tunnels& list, Conn& client, beast::flat_buffer& client_buffer, Conn& upstream,
         beast::flat_buffer& upstream_buffer, milliseconds idle_timeout, Counters counters);
  Tunnel(const Tunnel&) = delete;
  Tunnel& operator=(const Tunnel&) = delete;
  ~Tunnel();

  // Relays until the tunnel ends; once.
  net::awaitable<End> Run();
  // Ends the tunnel from outside (the drain): its operations are cancelled.
  void Close();

 private:
  friend class Tunnels;
  struct Side {
    Conn& conn;
    beast::flat_buffer& buffer;
    bool is_client;
  };
  net::awaitable<void> Pump(Side in, Side out, std::atomic<uint64_t>& bytes);
  void Note(End why);  // why the tunnel ends: the first reason noted
  // Notes `why` and ends the tunnel: every operation of both sides is cancelled.
  void Stop(End why);
  void Touch();  // a byte moved: the idle timeout counts from now on both sides

  Tunnels& list_;
  Tunnel* prev_ = nullptr;
  Tunnel* next_ = nullptr;
  Side client_, upstream_;
  const milliseconds idle_timeout_;
  Counters counters_;
  bool stopped_ = false;
  bool noted_ = false;
  End end_ = End::kClient;
};

}  // namespace tollgate::http
