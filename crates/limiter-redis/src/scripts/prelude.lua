-- Prelude shared by every script in this folder. The Rust side sends, as
-- one script per policy (or policy set):
--
--   local ttl_floor = ...      the TTL floor in ms (0 with Redis TIME)
--   this prelude
--   the file of each algorithm the policies use (each defines one function)
--   an epilogue calling them with each policy's constants, in the text
--   rather than in ARGV (Redis spends more receiving arguments than on
--   some of the scripts' commands), and building the reply.
--
-- KEYS[i]  the state of the request's key under the i-th policy
-- ARGV[1]  "acquire" (commit when admitted) or "peek" (write nothing)
-- ARGV[2]  cost n, 1 <= n <= every policy's max cost (checked by the caller)
-- ARGV[3]  request time in µs since the epoch, or "" for Redis TIME
--
-- It defines, for the algorithms that follow: acquire, n, time_us, floor
-- (math.floor, a local: a call through a helper costs Redis measurably
-- more), ceil_div, num (an integer as a string, never in exponent form),
-- ttl_ms(tick, t, t_eff, reset_after) (a key's TTL after an admission, in
-- ms), save(key, value, ms) (a string state and its TTL in one SET) and
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

local floor = math.floor
local function ceil_div(a, b)
  local q = floor(a / b)
  if q * b < a then q = q + 1 end
  return q
end
local function num(x) return string.format('%.0f', x) end

local acquire = ARGV[1] == 'acquire'
local n = tonumber(ARGV[2])
local time_us = tonumber(ARGV[3])

if not time_us then
  if redis.replicate_commands then redis.replicate_commands() end
  local now = redis.call('TIME')
  time_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
end

local function ttl_ms(tick, t, t_eff, reset_after)
  local ms = math.ceil((t_eff - t + reset_after) * tick / 1000) + 1
  if ms < ttl_floor then ms = ttl_floor end
  return num(ms)
end
-- One call for the state and its TTL: each redis.call costs the server
-- about as much as the arithmetic of a whole decision.
local function save(key, value, ms)
  redis.call('SET', key, value, 'PX', ms)
end
local function expire(key, ms)
  redis.call('PEXPIRE', key, ms)
end
