-- Token bucket (docs/spec.md section 3): bursts up to a capacity C, refilled at L
-- tokens per window W. A fresh key is full.
--
-- KEYS[1]  string "s l": s = tokens scaled by W (so refilling L per tick
--          is exact), l = tick of the last admission
-- ARGV[1]  "acquire" (commit when admitted) or "peek" (write nothing)
-- ARGV[2]  cost n, 1 <= n <= C (checked by the caller)
-- ARGV[3]  request time in µs since the epoch, or "" for Redis TIME
-- Policy constants, set in front of the prelude by the Rust side:
-- tick     tick q in µs (docs/spec.md section 5)
-- W        window W in ticks
-- L        refill rate L (tokens per window)
-- M        capacity C
-- ttl_floor TTL floor in ms (0 with Redis TIME)
--
-- Returns {allowed (1/0), remaining, retry_after, reset_after, wait,
--          t_eff, time_us}: durations in ticks; t_eff = max(t div q, T_s)
-- in ticks; time_us is the request time used (ARGV[3] or Redis TIME).
--
-- Every value stays below 2^53 (4*C*W <= 2^53 by the choice of tick; the
-- refill is capped at the time to fill from empty), exact in Lua's doubles.
-- A denied request writes nothing; an admitted one sets the key's TTL to
-- its reset_after, the time to refill (at least the floor).

-- key, acquire, n, time_us, tick, W, L, M, ttl_floor, t, floor, ceil_div,
-- num and expire come from prelude.lua (sent before this file).
local C = M -- capacity

local full = C * W
local s, last = full, 0
local state = redis.call('GET', key)
if state then
  local a, b = string.match(state, '^(%d+) (%d+)$')
  s, last = tonumber(a), tonumber(b)
end

local t_eff = math.max(t, last)
-- Past the time to refill from empty, more elapsed time changes nothing;
-- the cap keeps elapsed * L in range.
local elapsed = math.min(t_eff - last, ceil_div(full, L))
s = math.min(full, s + elapsed * L)
local need = n * W

if s >= need then
  s = s - need
  local reset_after = ceil_div(full - s, L)
  if acquire then
    save(num(s) .. ' ' .. num(t_eff), t_eff, reset_after)
  end
  return {1, floor(s / W), 0, reset_after, 0, t_eff, time_us}
end
return {0, floor(s / W), ceil_div(need - s, L), ceil_div(full - s, L), 0, t_eff, time_us}
