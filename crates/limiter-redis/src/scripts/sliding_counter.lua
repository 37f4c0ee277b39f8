-- Sliding window counter (docs/spec.md section 3): the previous window's count,
-- weighted by how much of it the trailing window still covers, plus the
-- current window's count.
--
-- KEYS[1]  string "w p c": w = start of the current window (ticks), p =
--          units admitted in the previous window, c = in the current one
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

local start_s, prev_s, curr_s = 0, 0, 0
local state = redis.call('GET', key)
if state then
  local a, b, c = string.match(state, '^(%d+) (%d+) (%d+)$')
  start_s, prev_s, curr_s = tonumber(a), tonumber(b), tonumber(c)
end

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
    save(num(start) .. ' ' .. num(prev) .. ' ' .. num(curr), t_eff, reset_after(curr))
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
