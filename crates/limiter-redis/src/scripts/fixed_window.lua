-- Fixed window (docs/spec.md section 3): one counter per aligned window.
--
-- KEYS[1]  string "w c": w = start of the window of the last admission
--          (ticks), c = units admitted in it
-- ARGV[1]  "acquire" (commit when admitted) or "peek" (write nothing)
-- ARGV[2]  cost n, 1 <= n <= L (checked by the caller)
-- ARGV[3]  request time in µs since the epoch, or "" for Redis TIME
-- Policy constants, set in front of the prelude by the Rust side:
-- tick     tick q in µs (docs/spec.md section 5)
-- W        window W in ticks
-- L        limit L
-- M        max cost (L here; unused)
-- ttl_floor TTL floor in ms (0 with Redis TIME)
--
-- Returns {allowed (1/0), remaining, retry_after, reset_after, wait,
--          t_eff, time_us}: durations in ticks; t_eff = max(t div q, T_s)
-- in ticks; time_us is the request time used (ARGV[3] or Redis TIME).
--
-- Every value stays below 2^53, exact in Lua's doubles. A denied request
-- writes nothing; an admitted one sets the key's TTL to its reset_after
-- (at least the floor).

-- key, acquire, n, time_us, tick, W, L, M, ttl_floor, t, floor, ceil_div,
-- num and expire come from prelude.lua (sent before this file).

local start_s, count_s = 0, 0
local state = redis.call('GET', key)
if state then
  local a, b = string.match(state, '^(%d+) (%d+)$')
  start_s, count_s = tonumber(a), tonumber(b)
end

local t_eff = math.max(t, start_s)
local e = t_eff - floor(t_eff / W) * W
local start = t_eff - e
local count = 0
if start == start_s then count = count_s end
local until_next = W - e

if count + n <= L then
  count = count + n
  if acquire then
    save(num(start) .. ' ' .. num(count), t_eff, until_next)
  end
  return {1, L - count, 0, until_next, 0, t_eff, time_us}
end
local reset_after = 0
if count > 0 then reset_after = until_next end
return {0, L - count, until_next, reset_after, 0, t_eff, time_us}
