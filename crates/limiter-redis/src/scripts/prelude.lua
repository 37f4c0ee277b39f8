-- Prelude shared by every function library in this folder. The Rust side
-- loads, as one Redis Functions library per policy (or policy set):
--
--   #!lua name=limiter_<digest>
--   local ttl_floor = ...      the TTL floor in ms (0 with Redis TIME)
--   this prelude
--   the file of each algorithm the policies use (each defines one function)
--   the registration of one function, limiter_<digest>, calling them with
--   each policy's constants, in the text rather than in ARGV (Redis spends
--   more receiving and converting arguments than on some of the
--   algorithms' arithmetic), and building the reply.
--
-- A library is loaded once (FUNCTION LOAD) and its functions live on: unlike
-- an EVALSHA script, nothing here is run again per call, so the helpers
-- below are created once, not on every decision.
--
-- KEYS[i]  the state of the request's key under the i-th policy
-- ARGV[1]  "acquire" (commit when admitted) or "peek" (write nothing)
-- ARGV[2]  cost n, 1 <= n <= every policy's max cost (checked by the caller)
-- ARGV[3]  request time in µs since the epoch, or "" for Redis TIME
--
-- It defines, for the algorithms that follow: begin(ARGV), which each call
-- starts with and which sets acquire, n and time_us; floor, min, max, ceil
-- (math's, bound as locals on the first call: a library's top level may not
-- touch math, and a local costs less than a global lookup per use);
-- pack and unpack (struct's: the string states are two or three
-- little-endian doubles, '<dd' or '<ddd', exact for integers below 2^53 and
-- far cheaper for Redis's Lua than formatting and matching text); ceil_div;
-- num (an integer as a string, never in exponent form); bit (a boolean as
-- 0 or 1, for the reply);
-- ttl_ms(tick, t, t_eff, reset_after) (a key's TTL after an admission, in
-- ms); save(key, value, ms) (a string state and its TTL in one SET) and
-- expire(key, ms) (the TTL of a state kept in another type).
--
-- Each algorithm's function takes (key, tick, W, L, max_cost) — the tick q
-- in µs (docs/spec.md section 5), the window W in ticks, the limit L (for
-- the buckets: units per window), the max cost (the capacity C for the
-- token bucket, the queue Q for the leaky bucket, L otherwise) — decides
-- the request without writing, and returns
--
--   allowed (boolean), remaining, retry_after, reset_after, reset_now,
--   wait, t_eff, write
--
-- durations in the policy's ticks; reset_after is the key's reset after
-- the admission when allowed (docs/spec.md section 1), reset_now the reset
-- of its state as it stands (what a denied policy set reports for a part
-- that would have admitted, docs/spec.md section 7); write commits the
-- admission (nil when denied).

local floor, min, max, ceil, format, pack, unpack
local acquire, n, time_us

local function begin(ARGV)
  if not floor then
    floor, min, max, ceil = math.floor, math.min, math.max, math.ceil
    format, pack, unpack = string.format, struct.pack, struct.unpack
  end
  acquire = ARGV[1] == 'acquire'
  n = tonumber(ARGV[2])
  time_us = tonumber(ARGV[3])
  if not time_us then
    local now = redis.call('TIME')
    time_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
  end
end

local function ceil_div(a, b)
  local q = floor(a / b)
  if q * b < a then q = q + 1 end
  return q
end
-- Redis 7 passes a number given to redis.call as its shortest exact digits;
-- only a number joined into a string needs num (Lua's own '..' would write
-- '%.14g' and round a 16-digit time).
local function num(x) return format('%.0f', x) end

-- A number, not a string: Redis 7 writes an integral double as its digits.
local function ttl_ms(tick, t, t_eff, reset_after)
  local ms = ceil((t_eff - t + reset_after) * tick / 1000) + 1
  if ms < ttl_floor then ms = ttl_floor end
  return ms
end
-- One call for the state and its TTL: each redis.call costs the server
-- about as much as the arithmetic of a whole decision.
local function save(key, value, ms)
  redis.call('SET', key, value, 'PX', ms)
end
local function expire(key, ms)
  redis.call('PEXPIRE', key, ms)
end
local function bit(a) if a then return 1 end return 0 end
