// Redis Sentinel, the lane's part: which node is the master now, asked of the sentinels,
// followed through failovers.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "store/redis/connection.hpp"
#include "store/redis/sentinel.hpp"

namespace tollgate::store::redis {

class Lane;

// Not thread-safe: runs on its lane's thread. Follows the master of a redis-sentinel:// URL for
// one lane. Each round asks every sentinel at once for the master's address
// (SENTINEL GET-MASTER-ADDR-BY-NAME) and the epoch of that choice (SENTINEL MASTER), and follows
// the newest answer (PickMaster). Rounds go at start (where the first answer is followed at
// once, until the others come), every second, at once when a sentinel announces +switch-master
// (each sentinel is subscribed), and when the master's connection fails or it answers READONLY
// (Lane::RefreshTopology). Following a new master drops the connection to the old one; the new
// one is used only once it answers ROLE with "master" (Connection).
class SentinelWatch {
 public:
  SentinelWatch(Lane& lane, boost::asio::io_context& ioc);
  ~SentinelWatch();
  SentinelWatch(const SentinelWatch&) = delete;
  SentinelWatch& operator=(const SentinelWatch&) = delete;

  // The first round, the subscriptions, and a round every second from then on.
  void Start();
  // A round now; when one is in flight, another once it ends.
  void Ask();
  // Whether no master is known and the sentinels are being asked: decisions wait for the round
  // (Lane::DispatchParked) rather than fail at once.
  bool Resolving() const { return !master_ && asking_; }
  // The connection to the master; before any sentinel named one, a connection that fails every
  // command at once (Peer::kNowhere).
  Connection& MasterNode();

 private:
  struct Sentinel {
    std::unique_ptr<Connection> ask;   // rounds
    std::unique_ptr<Connection> feed;  // subscribed to +switch-master
    bool subscribed = false;
    // This round: whether its answer is still to come, and the address it named, until the
    // epoch comes.
    bool waiting = false;
    std::optional<NodeAddress> named;
  };

  void Subscribe(Sentinel& s);
  void OnAddress(uint64_t round, size_t i, const redisReply* r, Failure f);
  void OnEpoch(uint64_t round, size_t i, const redisReply* r, Failure f);
  void Decide();  // the round is over: every sentinel answered or failed, or its time is up
  void Follow(const SentinelAnswer& next);
  void Tick();

  Lane& lane_;
  std::vector<Sentinel> sentinels_;
  Connection nowhere_;
  std::optional<SentinelAnswer> master_;
  // The round in flight.
  uint64_t round_ = 0;
  bool asking_ = false;
  bool again_ = false;  // asked for during the round: another after it
  std::vector<std::optional<SentinelAnswer>> answers_;
  size_t waiting_ = 0;  // sentinels yet to answer or fail
  boost::asio::steady_timer round_timer_;
  boost::asio::steady_timer tick_timer_;
};

}  // namespace tollgate::store::redis
