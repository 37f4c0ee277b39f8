-- Prelude shared by every script in this folder: the Rust side sends
-- `prelude.lua` followed by one algorithm's file as a single script.
--
-- KEYS[1]  the key's state
-- ARGV[1]  "acquire" (commit when admitted) or "peek" (write nothing)
-- ARGV[2]  cost n, 1 <= n <= the policy's maximum (checked by the caller)
-- ARGV[3]  request time in µs since the epoch, or "" for Redis TIME
-- ARGV[4]  tick q in µs (SPEC section 5)
-- ARGV[5]  window W in ticks
-- ARGV[6]  limit L (for the buckets: units per window)
-- ARGV[7]  maximum cost M: capacity C (token bucket), queue Q (leaky
--          bucket), L otherwise
-- ARGV[8]  TTL floor in ms (0 with Redis TIME)
--
-- It defines, for the algorithm that follows: key, acquire, n, time_us,
-- tick, W, L, M, ttl_floor, t (the request time in ticks), and
-- idiv, ceil_div, num (an integer as a string, never in exponent form) and
-- expire(t_eff, reset_after) (the key's TTL after an admission).

local function idiv(a, b) return math.floor(a / b) end
local function ceil_div(a, b)
  local q = idiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end
local function num(x) return string.format('%.0f', x) end

local key = KEYS[1]
local acquire = ARGV[1] == 'acquire'
local n = tonumber(ARGV[2])
local time_us = tonumber(ARGV[3])
local tick = tonumber(ARGV[4])
local W = tonumber(ARGV[5])
local L = tonumber(ARGV[6])
local M = tonumber(ARGV[7])
local ttl_floor = tonumber(ARGV[8])

if not time_us then
  if redis.replicate_commands then redis.replicate_commands() end
  local now = redis.call('TIME')
  time_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
end
local t = idiv(time_us, tick)

local function expire(t_eff, reset_after)
  local ms = math.ceil((t_eff - t + reset_after) * tick / 1000) + 1
  if ms < ttl_floor then ms = ttl_floor end
  redis.call('PEXPIRE', key, num(ms))
end
