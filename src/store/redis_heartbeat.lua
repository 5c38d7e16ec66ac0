-- A replica's heartbeat, on Redis's clock (issue 32, part 3; Replicas::Beat).
-- KEYS[1]: <prefix>:replicas, a sorted set of instance ids scored by their last beat (ms).
-- ARGV[1]: this replica's instance id.
-- Returns the replicas that beat in the last 5 s, this one included.
local t = redis.call('TIME')
local ms = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - 5000)
redis.call('PEXPIRE', KEYS[1], 60000)
return redis.call('ZCARD', KEYS[1])
