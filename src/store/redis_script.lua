-- tollgate: every check of one identity, evaluated atomically in one call.
-- The same arithmetic as src/core/*.cpp (the conformance suite holds them equal). All values
-- stay below 2^53, where Lua's double-precision numbers are exact integers.
--
-- KEYS[i]  the state of check i: a string "a b" (fixed-size algorithms) or a sorted set (log).
-- ARGV[1]  now in microseconds since the epoch; 0 = read Redis TIME (one clock for all replicas)
-- ARGV[2]  1 = consume (all-or-nothing), 0 = peek (change nothing); 'B' / 'b': the same, on the
--          token-bucket path (next section), whose arguments and reply differ
-- ARGV[3 + 7(i-1) ...]  per check: algorithm, cost, enforced (1/0), p1, p2, p3, p4
--   0 token bucket    p1 capacity, p2 refill units per us (rate.tokens), p3 units per token,
--                     p4 debt: units the deficit may pass the capacity by (smoothing; 0: none)
--   1 sliding log     p1 limit, p2 window (us)
--   2 sliding counter p1 limit, p2 window (ms)
--   3 fixed window    p1 limit, p2 window (us)
--   4 quota           p1 period (0 day, 1 month), p2 allowance (0 none), p3 ceiling (0 none)
-- Returns {now, committed, then per check: allowed, code, limit, remaining, reset_us,
--          retry_after_us (-1 never), used, over_allowance, delay_us}
-- Codes: 0 none, 1 rate_limited, 2 quota_exceeded, 3 ceiling_exceeded, 4 cost_exceeds_capacity

-- The fast path: every check of the batch is a token bucket (the usual batch: one burst check).
-- Same state and arithmetic as token_bucket() below, with less work per call; each piece was
-- weighed in instructions per call inside redis-server (bench/redis/instructions.sh): no closures
-- but the refill's (one function for every path here, for 1-3 % more instructions), no
-- tonumber() calls (arithmetic coerces the strings), constant arguments computed by the client,
-- and a reply of one number per check from which the client derives the whole decision with the
-- same core code as MemoryStore (src/core/token_bucket.cpp).
-- ARGV[1]  now as above; ARGV[2] 'B' = consume (all-or-nothing), 'b' = peek
-- ARGV[3 + 5(i-1) ...]  per check: need (cost x units per token), refill units per us,
--   key TTL in ms (the time an empty bucket takes to refill: at least as long as any deficit),
--   room (capacity units - need; < 0 when the cost exceeds the capacity), enforced (1/0)
-- Returns {now, then per check: the deficit at now before this request}.
local fast = ARGV[2]
-- ARGV[1] as a number: the caller's time, or Redis's own when it is '0'.
local function clock()
  local now = ARGV[1]
  if now ~= '0' then return now + 0 end
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end
-- The deficit at `now` of a bucket whose stored state is s ("<deficit> <time>"; false when the
-- key is absent: a full bucket), refilled at `rate` units per us.
local function deficit_at(s, rate, now)
  if not s then return 0 end
  local x, t = string.match(s, '^(-?%d+) (-?%d+)$')
  local d = x + 0
  local elapsed = now - t
  if d <= 0 or elapsed <= 0 then return d end
  -- elapsed * rate >= d  <=>  elapsed >= ceil(d / rate). The product is exact below 2^53 and
  -- rounds to at least 2^53 > d above it, so the comparison is exact either way.
  if elapsed * rate >= d then return 0 end
  return d - elapsed * rate
end
if fast == 'B' or fast == 'b' then
  local now = clock()
  local n = #KEYS
  local out = {now, 0}
  local commit = fast == 'B'
  for i = 1, n do
    local d = deficit_at(redis.call('GET', KEYS[i]), ARGV[5 * i - 1] + 0, now)
    out[i + 1] = d
    if commit and d > ARGV[5 * i + 1] + 0 and ARGV[5 * i + 2] == '1' then commit = false end
  end
  if commit then
    for i = 1, n do
      local d = out[i + 1]
      local need = ARGV[5 * i - 2] + 0
      if need > 0 and d <= ARGV[5 * i + 1] + 0 then
        redis.call('SET', KEYS[i], string.format('%d %d', d + need, now), 'PX', ARGV[5 * i])
      end
    end
  end
  return out
end

-- Many requests in one call (RedisStore groups the token-bucket requests that wait for a
-- connection while earlier ones are in flight): each is decided in turn, exactly as if it came in
-- its own call at the same `now`. Every key is read by one MGET, and a key debited by several of
-- them is written once, at the end. Requests of the same shape (the same checks' arguments, as in
-- the usual group: one plan, cost 1) share one copy of their arguments.
-- ARGV[1]  now, as above; ARGV[2] 'M', or 'U' when no key is named twice in the call (then each
--   request is written as it is decided, without the tables that follow a key through the call:
--   13 % fewer instructions per decision with random keys)
-- ARGV[3] the number of shapes S
-- then per shape: its number of checks n and n x 5 arguments as on the path above;
-- then per request: 4 x (its shape's index, from 1) + 2 if its keys are the previous request's
--   + 1 to consume, + 0 to peek.
-- KEYS: every request's keys, in order, but once for a run of requests with the same keys.
-- Returns {now, then per request, per check: the deficit at now before this request}.
if fast == 'M' or fast == 'U' then
  local now = clock()
  local shapes = {}
  local a = 4
  for i = 1, ARGV[3] + 0 do
    local n = ARGV[a] + 0
    local shape = {n = n}
    for j = 1, n do
      local p = a + 1 + 5 * (j - 1)
      -- need, refill units per us, TTL (ms), room, enforced; need and TTL as sent, too
      shape[j] = {ARGV[p] + 0, ARGV[p + 1] + 0, ARGV[p + 2] + 0, ARGV[p + 3] + 0, ARGV[p + 4] == '1',
                  ARGV[p], ARGV[p + 2]}
    end
    shapes[i] = shape
    a = a + 1 + 5 * n
  end
  -- Every key read at once, before any write (a key named twice reads the same twice).
  local stored = redis.call('MGET', unpack(KEYS))
  local out = {now}
  local nows = string.format('%d', now)
  local k = 0
  -- With 'U' each key is read and written by one request only: it is written as it is decided,
  -- and the tables that follow a key through the call stay empty.
  local unique = fast == 'U'
  local deficit = {}  -- key -> deficit at now, after the debits of the requests so far
  local ttl = {}      -- key -> the check whose TTL the key gets (the longest asked for)
  local fresh = {}    -- key -> need as sent, while its state is one debit from a full bucket
  local written = {}  -- the keys to write, in order
  local last = 0  -- the number of keys of the request before
  for r = a, #ARGV do
    local v = ARGV[r] + 0
    local commit = v % 2 == 1
    if v % 4 >= 2 then k = k - last end
    local shape = shapes[(v - v % 4) / 4]
    local n = shape.n
    last = n
    local first = #out
    for i = 1, n do
      local c = shape[i]
      local d
      if unique then
        d = deficit_at(stored[k + i], c[2], now)
      else
        local key = KEYS[k + i]
        d = deficit[key]
        if d == nil then
          d = deficit_at(stored[k + i], c[2], now)
          deficit[key] = d
        end
      end
      out[first + i] = d
      if commit and d > c[4] and c[5] then commit = false end
    end
    if commit then
      for i = 1, n do
        local c = shape[i]
        local d = out[first + i]
        if c[1] > 0 and d <= c[4] then
          local key = KEYS[k + i]
          if unique then
            local state = d == 0 and c[6] .. ' ' .. nows or string.format('%d %s', d + c[1], nows)
            redis.call('SET', key, state, 'PX', c[7])
          else
            if ttl[key] == nil then
              written[#written + 1] = key
              ttl[key] = c
              if d == 0 then fresh[key] = c[6] end
            else
              if c[3] > ttl[key][3] then ttl[key] = c end
              fresh[key] = nil
            end
            deficit[key] = d + c[1]
          end
        end
      end
    end
    k = k + n
  end
  -- The state as text without a number formatted per key where it can (formatting was a tenth
  -- of the cost): `now` once, and a key one debit from full holds the need as sent.
  for i = 1, #written do
    local key = written[i]
    local need = fresh[key]
    local state = need and need .. ' ' .. nows or string.format('%d %s', deficit[key], nows)
    redis.call('SET', key, state, 'PX', ttl[key][7])
  end
  return out
end

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local consume = ARGV[2] == '1'
local DAY_US = 86400000000

local function idiv(a, b) -- floor(a / b), exact for |a| < 2^53, b > 0
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ceildiv(a, b)
  if a <= 0 then return 0 end
  return -idiv(-a, b)
end

-- Howard Hinnant's civil-date algorithms (as src/core/calendar.cpp).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = idiv(y, 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = idiv(153 * mp + 2, 5) + d - 1
  local doe = yoe * 365 + idiv(yoe, 4) - idiv(yoe, 100) + doy
  return era * 146097 + doe - 719468
end
local function civil_from_days(z)
  z = z + 719468
  local era = idiv(z, 146097)
  local doe = z - era * 146097
  local yoe = idiv(doe - idiv(doe, 1460) + idiv(doe, 36524) - idiv(doe, 146096), 365)
  local doy = doe - (365 * yoe + idiv(yoe, 4) - idiv(yoe, 100))
  local mp = idiv(5 * doy + 2, 153)
  local d = doy - idiv(153 * mp + 2, 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end
-- Period index and end (us) of the period containing t.
local function period_of(kind, t)
  local days = idiv(t, DAY_US)
  if kind == 0 then return days, (days + 1) * DAY_US end
  local y, m = civil_from_days(days)
  local ny, nm = y, m + 1
  if nm == 13 then ny, nm = y + 1, 1 end
  return y * 12 + m - 1, days_from_civil(ny, nm, 1) * DAY_US
end

local function read_pair(key)
  local v = redis.call('GET', key)
  if not v then return 0, 0 end
  local a, b = string.match(v, '^(-?%d+) (-?%d+)$')
  return tonumber(a), tonumber(b)
end

-- Each evaluator returns: decision table, and the new state {a, b, expires_at} when allowed.
local function token_bucket(key, cost, cap, tokens, unit, debt)
  local a, b = read_pair(key)
  local full = cap * unit
  local deficit = a
  local elapsed = now - b
  if deficit > 0 and elapsed > 0 then
    if elapsed >= ceildiv(deficit, tokens) then deficit = 0 else deficit = deficit - elapsed * tokens end
  end
  local d = {1, 0, cap, 0, 0, 0, 0, 0, 0}
  local new
  if cost > cap then
    d[1], d[2], d[6] = 0, 4, -1
  elseif deficit + cost * unit <= full + debt then
    deficit = deficit + cost * unit
    new = {deficit, now, now + ceildiv(deficit, tokens)}
    -- Smoothing: past the capacity, the request is served when its tokens have arrived.
    if deficit > full then d[9] = ceildiv(deficit - full, tokens) end
  else
    d[1], d[2], d[6] = 0, 1, ceildiv(deficit + cost * unit - full - debt, tokens)
  end
  d[4] = idiv(math.max(0, full - deficit), unit)
  d[5] = ceildiv(deficit, tokens)
  return d, new
end

local function fixed_window(key, cost, limit, w)
  local a, b = read_pair(key)
  local index = idiv(now, w)
  local count = (a == index) and b or 0
  local to_end = (index + 1) * w - now
  local d = {1, 0, limit, 0, 0, 0, 0, 0}
  local new
  if cost > limit then
    d[1], d[2], d[6], d[4] = 0, 4, -1, limit - count
    return d, nil
  end
  if count + cost <= limit then
    new = {index, count + cost, (index + 1) * w}
    d[4] = limit - count - cost
  else
    d[1], d[2], d[6] = 0, 1, to_end
    d[4] = math.max(0, limit - count)
  end
  if d[4] ~= limit then d[5] = to_end end
  return d, new
end

local function sliding_counter(key, cost, limit, w)
  local a, b = read_pair(key)
  local now_ms = idiv(now, 1000)
  local index = idiv(now_ms, w)
  local elapsed = now_ms - index * w
  local prev, curr = 0, 0
  local hi, lo = idiv(b, 4294967296), b % 4294967296
  if a == index then prev, curr = hi, lo elseif a == index - 1 then prev = lo end
  local end_us = (index + 1) * w * 1000 - now
  local next_end_us = end_us + w * 1000
  local weighted = prev * (w - elapsed) + curr * w
  local function remaining_after(extra)
    return math.max(0, idiv(limit * w - weighted - extra * w, w))
  end
  local d = {1, 0, limit, 0, 0, 0, 0, 0}
  local new
  if cost > limit then
    d[1], d[2], d[6] = 0, 4, -1
    d[4] = remaining_after(0)
  elseif weighted + cost * w <= limit * w then
    d[4] = remaining_after(cost)
    curr = curr + cost
    new = {index, prev * 4294967296 + curr, (index + 2) * w * 1000}
  else
    d[1], d[2] = 0, 1
    d[4] = remaining_after(0)
    if curr + cost <= limit then
      local e = w - idiv((limit - curr - cost) * w, prev)
      d[6] = (index * w + e) * 1000 - now
    else
      local e = w - idiv((limit - cost) * w, curr)
      d[6] = end_us + e * 1000
    end
  end
  if curr > 0 then d[5] = next_end_us elseif prev > 0 then d[5] = end_us end
  return d, new
end

local function quota(key, cost, kind, allowance, ceiling)
  local a, b = read_pair(key)
  local index, period_end = period_of(kind, now)
  local used = (a == index) and b or 0
  local limit = allowance > 0 and allowance or ceiling
  local d = {1, 0, limit, 0, period_end - now, 0, used, 0}
  local new
  if ceiling > 0 and cost > ceiling then
    d[1], d[2], d[6] = 0, 4, -1
  elseif ceiling == 0 or used + cost <= ceiling then
    used = used + cost
    d[7] = used
    new = {index, used, period_end}
  else
    d[1], d[6] = 0, period_end - now
    d[2] = allowance > 0 and 3 or 2
  end
  d[4] = math.max(0, limit - d[7])
  if allowance > 0 and d[7] > allowance then d[8] = 1 end
  return d, new
end

-- The log: a sorted set of accepted requests, score = time, member = "time:cost:n".
local function sliding_log(key, cost, limit, w, record)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
  local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local total, newest = 0, nil
  local costs = {}
  for i = 1, #entries, 2 do
    local c = tonumber(string.match(entries[i], '^%-?%d+:(%d+):'))
    costs[#costs + 1] = {tonumber(entries[i + 1]), c}
    total = total + c
    newest = tonumber(entries[i + 1])
  end
  local d = {1, 0, limit, 0, 0, 0, 0, 0}
  local new
  if cost > limit then
    d[1], d[2], d[6] = 0, 4, -1
  elseif total + cost <= limit then
    if record and cost > 0 then
      -- Recorded at commit; the decision then reports the state after it (see below).
      new = {newest and math.max(now, newest) or now, cost, #costs}
    end
  else
    d[1], d[2] = 0, 1
    local left, leaves_at = total, now
    for i = 1, #costs do
      if left + cost <= limit then break end
      left = left - costs[i][2]
      leaves_at = costs[i][1] + w
    end
    d[6] = leaves_at - now
  end
  d[4] = math.max(0, limit - total)
  if newest then d[5] = newest + w - now end
  return d, new
end

local n = (#ARGV - 2) / 7
local out = {now, 0}
local states = {}
local commit = consume
for i = 1, n do
  local base = 3 + (i - 1) * 7
  local alg = tonumber(ARGV[base])
  local cost = tonumber(ARGV[base + 1])
  local enforced = ARGV[base + 2] == '1'
  local p1, p2, p3 = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
  local d, new
  if alg == 0 then d, new = token_bucket(KEYS[i], cost, p1, p2, p3, tonumber(ARGV[base + 6]))
  elseif alg == 1 then d, new = sliding_log(KEYS[i], cost, p1, p2, consume)
  elseif alg == 2 then d, new = sliding_counter(KEYS[i], cost, p1, p2)
  elseif alg == 3 then d, new = fixed_window(KEYS[i], cost, p1, p2)
  else d, new = quota(KEYS[i], cost, p1, p2, p3) end
  if d[1] == 0 and enforced then commit = false end
  states[i] = {alg, cost, new, p2}
  for j = 1, 9 do out[#out + 1] = d[j] or 0 end
end
if not commit then
  -- Nothing changes, so allowed checks report their state as it is, not after a debit that did
  -- not happen (the headers of a 429 stay honest). Logs already report it that way.
  for i = 1, n do
    local at = 2 + (i - 1) * 9
    local alg, cost = states[i][1], states[i][2]
    if out[at + 1] == 1 and cost > 0 and alg ~= 1 then
      local base = 3 + (i - 1) * 7
      local p1, p2, p3 = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
      local d
      if alg == 0 then d = token_bucket(KEYS[i], 0, p1, p2, p3, tonumber(ARGV[base + 6]))
      elseif alg == 2 then d = sliding_counter(KEYS[i], 0, p1, p2)
      elseif alg == 3 then d = fixed_window(KEYS[i], 0, p1, p2)
      else d = quota(KEYS[i], 0, p1, p2, p3) end
      for j = 1, 9 do out[at + j] = d[j] or 0 end
    end
  end
end
if commit then
  out[2] = 1
  for i = 1, n do
    local alg, cost, new, w = states[i][1], states[i][2], states[i][3], states[i][4]
    if new and cost > 0 then
      if alg == 1 then
        redis.call('ZADD', KEYS[i], new[1], string.format('%d:%d:%d', new[1], new[2], new[3]))
        -- Every entry leaves the window by newest + w.
        redis.call('PEXPIRE', KEYS[i], ceildiv(new[1] + w - now, 1000) + 1)
        local at = 2 + (i - 1) * 9
        out[at + 4] = math.max(0, out[at + 4] - cost)
        out[at + 5] = new[1] + w - now
      else
        -- PX: the key lives exactly as long as it holds information (at least 1 ms).
        local ttl_ms = math.max(1, ceildiv(new[3] - now, 1000))
        redis.call('SET', KEYS[i], string.format('%d %d', new[1], new[2]), 'PX', ttl_ms)
      end
    end
  end
end
return out
