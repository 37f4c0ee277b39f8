-- Sliding window counter (docs/spec.md section 3): the previous window's count,
-- weighted by how much of it the trailing window still covers, plus the
-- current window's count.
--
-- sliding_counter(key, tick, W, L); the key holds (w, p, c) packed as
-- '<ddd' (see the prelude): w = start of the current window (ticks), p =
-- units admitted in the previous window, c = in the current one.
-- Called as the prelude describes: decides without writing, and returns
-- (allowed, remaining, retry_after, reset_after, reset_now, wait, t_eff,
-- write, and write's arguments) in ticks, t_eff = max(t div q, T_s).
--
-- Every value stays below 2^53 (L*W <= 2^51 by the choice of tick), exact
-- in Lua's doubles. An admission leaves the key a TTL of at least its
-- reset_after (and the floor; see save).

-- The remaining units after c in the current window, and the key's reset,
-- at e ticks into it: functions of their own, not closures made per
-- decision (each costs Redis's Lua about a sixth of a decision).
local function sc_remaining(L, W, weighted_prev, c)
  local r = floor((L * W - weighted_prev) / W) - c
  if r < 0 then r = 0 end
  return r
end
local function sc_reset(W, e, prev, c)
  if c > 0 then return 2 * W - e end
  if prev > 0 then return W - e end
  return 0
end

local function sliding_counter(key, tick, W, L)
  local t = floor(time_us / tick)
  local start_s, prev_s, curr_s = 0, 0, 0
  local state = states[key]
  if state == decoded then
    local r = repeated[key]
    start_s, prev_s, curr_s = r[1], r[2], r[3]
  elseif state and (#state == 32 or #state == 40) then
    -- (A string of another length is none of ours: read as none, and
    -- written over, as a key of another type is.)
    start_s, prev_s, curr_s = unpack('<ddd', state)
  end
  local t_eff = max(t, start_s)
  local e = t_eff - floor(t_eff / W) * W
  local start = t_eff - e
  local prev, curr = 0, 0
  if start == start_s then
    prev, curr = prev_s, curr_s
  elseif start - start_s == W then -- (start_s + W may exceed 2^53)
    prev, curr = curr_s, 0
  end
  local weighted_prev = prev * (W - e)
  local reset_now = sc_reset(W, e, prev, curr)
  if weighted_prev + (curr + n) * W <= L * W then
    local counted = curr + n
    local reset = sc_reset(W, e, prev, counted)
    return true, sc_remaining(L, W, weighted_prev, counted), 0, reset, reset_now, 0,
      t_eff, save, key, ttl_ms(tick, t, t_eff, reset), start, prev, counted
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
  return false, sc_remaining(L, W, weighted_prev, curr), retry_after, reset_now, reset_now, 0,
    t_eff, nil
end
