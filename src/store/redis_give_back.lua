-- Unspent leased tokens given back to a token bucket (LeasingStore, RedisStore::GiveBack).
-- KEYS[1]: the bucket's key; its value "<deficit> <time_us>" as redis_script.lua writes it.
-- ARGV[1]: the tokens given back, in the bucket's units (tokens * unit).
-- ARGV[2]: the refill rate, units per microsecond.
-- The deficit now (as redis_script.lua's deficit_at), less the tokens; a full bucket is no key.
-- Returns the deficit left.
local s = redis.call('GET', KEYS[1])
if not s then return 0 end
local x, t = string.match(s, '^(-?%d+) (-?%d+)$')
local tm = redis.call('TIME')
local now = tm[1] * 1000000 + tm[2]
local d = x + 0
local elapsed = now - t
if d > 0 and elapsed > 0 then
  if elapsed * ARGV[2] >= d then d = 0 else d = d - elapsed * ARGV[2] end
end
d = d - ARGV[1]
if d <= 0 then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[1], string.format('%d %d', d, now), 'KEEPTTL')
return d
