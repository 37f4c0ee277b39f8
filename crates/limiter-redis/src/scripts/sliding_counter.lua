-- Sliding window counter (docs/spec.md section 3): the previous window's count,
-- weighted by how much of it the trailing window still covers, plus the
-- current window's count.
--
-- KEYS[1]  hash {w = start of the current window (ticks),
--                p = units admitted in the window before it,
--                c = units admitted in the current window}
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
-- Every value stays below 2^53 (L*W <= 2^51 by the choice of tick), exact
-- in Lua's doubles. A denied request writes nothing; an admitted one sets
-- the key's TTL to its reset_after (at least the floor).

-- key, acquire, n, time_us, tick, W, L, M, ttl_floor, t, floor, ceil_div,
-- num and expire come from prelude.lua (sent before this file).

local state = redis.call('HMGET', key, 'w', 'p', 'c')
local start_s = tonumber(state[1]) or 0
local prev_s = tonumber(state[2]) or 0
local curr_s = tonumber(state[3]) or 0

local t_eff = math.max(t, start_s)
local e = t_eff - floor(t_eff / W) * W
local start = t_eff - e
local prev, curr = 0, 0
if start == start_s then
  prev, curr = prev_s, curr_s
elseif start - start_s == W then -- (start_s + W may exceed 2^53)
  prev, curr = curr_s, 0
end

local weighted_prev = prev * (W - e)
local function remaining(c)
  local r = floor((L * W - weighted_prev) / W) - c
  if r < 0 then r = 0 end
  return r
end
local function reset_after(c)
  if c > 0 then return 2 * W - e end
  if prev > 0 then return W - e end
  return 0
end

if weighted_prev + (curr + n) * W <= L * W then
  curr = curr + n
  if acquire then
    redis.call('HSET', key, 'w', num(start), 'p', num(prev), 'c', num(curr))
    expire(t_eff, reset_after(curr))
  end
  return {1, remaining(curr), 0, reset_after(curr), 0, t_eff, time_us}
end

local retry_after
if curr + n <= L then
  -- Wait, within this window, for the previous window's weight to fall.
  retry_after = W - floor((L - curr - n) * W / prev) - e
else
  -- Wait for the next window, then for this one's weight to fall.
  local e2 = W - floor((L - n) * W / curr)
  if e2 > W then e2 = W end
  retry_after = (W - e) + e2
end
return {0, remaining(curr), retry_after, reset_after(curr), 0, t_eff, time_us}
