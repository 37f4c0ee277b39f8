-- Prelude shared by every script in this folder. The Rust side sends, as
-- one script per policy: a line setting the policy's constants
--
--   local tick, W, L, M, ttl_floor = ...
--
-- (tick q in µs, docs/spec.md section 5; window W in ticks; limit L, for the
-- buckets units per window; maximum cost M: capacity C for the token
-- bucket, queue Q for the leaky bucket, L otherwise; TTL floor in ms, 0
-- with Redis TIME), then this prelude, then one algorithm's file. Constants
-- in the text rather than in ARGV: Redis spends more receiving arguments
-- than on some of the scripts' commands.
--
-- KEYS[1]  the key's state
-- ARGV[1]  "acquire" (commit when admitted) or "peek" (write nothing)
-- ARGV[2]  cost n, 1 <= n <= M (checked by the caller)
-- ARGV[3]  request time in µs since the epoch, or "" for Redis TIME
--
-- It defines, for the algorithm that follows: key, acquire, n, time_us,
-- t (the request time in ticks), and floor (math.floor, a local: a call
-- through a helper costs Redis measurably more), ceil_div, num (an integer as a
-- string, never in exponent form), ttl_ms(t_eff, reset_after) (the key's
-- TTL after an admission, in ms), save(value, t_eff, reset_after) (writes
-- a string state and its TTL in one SET) and expire(t_eff, reset_after)
-- (sets the TTL of a state kept in another type).

local floor = math.floor
local function ceil_div(a, b)
  local q = floor(a / b)
  if q * b < a then q = q + 1 end
  return q
end
local function num(x) return string.format('%.0f', x) end

local key = KEYS[1]
local acquire = ARGV[1] == 'acquire'
local n = tonumber(ARGV[2])
local time_us = tonumber(ARGV[3])

if not time_us then
  if redis.replicate_commands then redis.replicate_commands() end
  local now = redis.call('TIME')
  time_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
end
local t = floor(time_us / tick)

local function ttl_ms(t_eff, reset_after)
  local ms = math.ceil((t_eff - t + reset_after) * tick / 1000) + 1
  if ms < ttl_floor then ms = ttl_floor end
  return num(ms)
end
-- One call for the state and its TTL: each redis.call costs the server
-- about as much as the arithmetic of a whole decision.
local function save(value, t_eff, reset_after)
  redis.call('SET', key, value, 'PX', ttl_ms(t_eff, reset_after))
end
local function expire(t_eff, reset_after)
  redis.call('PEXPIRE', key, ttl_ms(t_eff, reset_after))
end
