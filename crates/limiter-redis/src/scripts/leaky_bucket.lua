-- Leaky bucket (docs/spec.md section 3): a queue of at most Q units that drains L
-- units per window W. A fresh key is empty.
--
-- KEYS[1]  string "s l": s = queued units scaled by W, l = tick of the
--          last admission
-- ARGV[1]  "acquire" (commit when admitted) or "peek" (write nothing)
-- ARGV[2]  cost n, 1 <= n <= Q (checked by the caller)
-- ARGV[3]  request time in µs since the epoch, or "" for Redis TIME
-- Policy constants, set in front of the prelude by the Rust side:
-- tick     tick q in µs (docs/spec.md section 5)
-- W        window W in ticks
-- L        drain rate L (units per window)
-- M        queue Q
-- ttl_floor TTL floor in ms (0 with Redis TIME)
--
-- Returns {allowed (1/0), remaining, retry_after, reset_after, wait,
--          t_eff, time_us}: durations in ticks, wait = how long an admitted
-- request waits for the units ahead of it to drain; t_eff = max(t div q, T_s)
-- in ticks; time_us is the request time used (ARGV[3] or Redis TIME).
--
-- Every value stays below 2^53 (4*Q*W <= 2^53 by the choice of tick; the
-- drain is capped at the time to drain from full), exact in Lua's doubles.
-- A denied request writes nothing; an admitted one sets the key's TTL to
-- its reset_after, the time to drain (at least the floor).

-- key, acquire, n, time_us, tick, W, L, M, ttl_floor, t, floor, ceil_div,
-- num and expire come from prelude.lua (sent before this file).
local Q = M -- queue

local full = Q * W
local s, last = 0, 0
local state = redis.call('GET', key)
if state then
  local a, b = string.match(state, '^(%d+) (%d+)$')
  s, last = tonumber(a), tonumber(b)
end

local t_eff = math.max(t, last)
-- Past the time to drain from full, more elapsed time changes nothing;
-- the cap keeps elapsed * L in range.
local elapsed = math.min(t_eff - last, ceil_div(full, L))
s = math.max(0, s - elapsed * L)
local need = n * W

if s + need <= full then
  local wait = ceil_div(s, L)
  s = s + need
  local reset_after = ceil_div(s, L)
  if acquire then
    save(num(s) .. ' ' .. num(t_eff), t_eff, reset_after)
  end
  return {1, floor((full - s) / W), 0, reset_after, wait, t_eff, time_us}
end
return {0, floor((full - s) / W), ceil_div(s + need - full, L), ceil_div(s, L), 0, t_eff, time_us}
