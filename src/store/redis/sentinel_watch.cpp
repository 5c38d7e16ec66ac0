#include "store/redis/sentinel_watch.hpp"

#include <string>
#include <utility>

#include "store/redis/lane.hpp"
#include "store/redis/resp.hpp"

namespace tollgate::store::redis {
namespace {

namespace net = boost::asio;
using std::chrono::milliseconds;

// How often a lane asks the sentinels when nothing prompts it: a missed +switch-master (its
// subscription was down) is noticed within this, and a lost subscription renewed.
constexpr milliseconds kAskEvery{1000};

}  // namespace

SentinelWatch::SentinelWatch(Lane& lane, net::io_context& ioc)
    : lane_(lane),
      nowhere_(lane, ioc, NodeAddress{"master '" + lane.url().master_name + "'", "unknown"},
               Peer::kNowhere),
      round_timer_(ioc),
      tick_timer_(ioc) {
  for (const NodeAddress& a : lane.url().nodes) {
    sentinels_.push_back(Sentinel{std::make_unique<Connection>(lane, ioc, a, Peer::kSentinel),
                                  std::make_unique<Connection>(lane, ioc, a, Peer::kSentinel)});
  }
}

SentinelWatch::~SentinelWatch() = default;

void SentinelWatch::Start() { Tick(); }

void SentinelWatch::Tick() {
  Ask();
  for (Sentinel& s : sentinels_) Subscribe(s);
  tick_timer_.expires_after(kAskEvery);
  tick_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) Tick();
  });
}

Connection& SentinelWatch::MasterNode() { return master_ ? lane_.Node(master_->master) : nowhere_; }

// A sentinel publishes +switch-master when its own view changes, so the first of them to learn
// of a failover wakes every lane subscribed to it; the round that follows checks the epochs.
void SentinelWatch::Subscribe(Sentinel& s) {
  if (s.subscribed) return;
  s.subscribed = true;
  s.feed->OnPush([this, &s](const redisReply* r, Failure f) {
    if (f != Failure::kNone) {
      s.subscribed = false;  // renewed at the next tick
    } else if (IsSwitchOf(ToValue(r), lane_.url().master_name)) {
      Ask();
    }
  });
  std::string cmd;
  AppendCommand(cmd, {"SUBSCRIBE", "+switch-master"});
  s.feed->Send(cmd, [&s](const redisReply* r, Failure f) {
    if (f != Failure::kNone || r->type == REDIS_REPLY_ERROR) s.subscribed = false;
  });
}

void SentinelWatch::Ask() {
  if (asking_) {
    again_ = true;
    return;
  }
  asking_ = true;
  again_ = false;
  const uint64_t round = ++round_;
  answers_.assign(sentinels_.size(), std::nullopt);
  waiting_ = sentinels_.size();
  // A sentinel that accepts the connection but does not answer must not hold the round.
  round_timer_.expires_after(milliseconds(lane_.options().connect_timeout_ms));
  round_timer_.async_wait([this, round](const boost::system::error_code& ec) {
    if (ec || round != round_ || !asking_) return;
    for (Sentinel& s : sentinels_) {
      if (!s.waiting) continue;
      // Silent: its replies would be late, and its subscription is likely as dead (renewed at
      // the next tick).
      s.ask->Reset();
      s.feed->Reset();
    }
    if (round == round_ && asking_) Decide();
  });
  const std::string& name = lane_.url().master_name;
  std::string address;
  AppendCommand(address, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", name});
  std::string master;
  AppendCommand(master, {"SENTINEL", "MASTER", name});
  for (size_t i = 0; i < sentinels_.size(); ++i) {
    Connection& conn = *sentinels_[i].ask;
    sentinels_[i].named.reset();
    sentinels_[i].waiting = true;
    // Both leave in one write; their replies come in order.
    conn.Send(address,
              [this, round, i](const redisReply* r, Failure f) { OnAddress(round, i, r, f); });
    conn.Send(master,
              [this, round, i](const redisReply* r, Failure f) { OnEpoch(round, i, r, f); });
  }
}

void SentinelWatch::OnAddress(uint64_t round, size_t i, const redisReply* r, Failure f) {
  if (round != round_ || !asking_ || f != Failure::kNone) return;
  sentinels_[i].named = MasterAddressOf(ToValue(r));
}

void SentinelWatch::OnEpoch(uint64_t round, size_t i, const redisReply* r, Failure f) {
  if (round != round_ || !asking_) return;
  Sentinel& s = sentinels_[i];
  s.waiting = false;
  if (f == Failure::kNone && s.named) {
    // A sentinel that names a master but refuses SENTINEL MASTER (an ACL) counts as epoch 0.
    answers_[i] = SentinelAnswer{*s.named, ConfigEpochOf(ToValue(r)).value_or(0)};
    // No master known yet (start): the first answer is followed at once, so decisions wait for
    // the fastest sentinel only; the round's end may still prefer a newer epoch.
    if (!master_) {
      Follow(*answers_[i]);
      lane_.DispatchParked();
    }
  }
  if (--waiting_ == 0) Decide();
}

void SentinelWatch::Decide() {
  asking_ = false;
  round_timer_.cancel();
  const std::optional<SentinelAnswer> pick = PickMaster(answers_, master_, sentinels_.size());
  if (!pick && !master_) {
    lane_.NoteFailure("sentinels: none named a master for '" + lane_.url().master_name + "'");
  }
  if (pick && (!master_ || pick->master != master_->master)) {
    Follow(*pick);
  } else if (pick) {
    master_->epoch = pick->epoch;
  }
  lane_.DispatchParked();
  if (again_) Ask();
}

void SentinelWatch::Follow(const SentinelAnswer& next) {
  const std::optional<SentinelAnswer> previous = std::exchange(master_, next);
  SharedState& shared = lane_.shared();
  {
    // Counted once per failover, by the first lane to follow it.
    std::lock_guard lock(shared.master_mu);
    if (!shared.master.host.empty() && shared.master != next.master) {
      lane_.stats().master_switches.fetch_add(1, std::memory_order_relaxed);
    }
    shared.master = next.master;
  }
  if (!previous) return;
  // Nothing more goes to the old master, not even what was queued for it.
  lane_.CloseNode(previous->master, "no longer the master of '" + lane_.url().master_name +
                                        "' (now " + next.master.host + ":" + next.master.port +
                                        ")");
  // The breaker opened on the old master's failures: the new one is probed now, not once the
  // breaker's time is up.
  lane_.breaker().ProbeNow();
}

}  // namespace tollgate::store::redis
