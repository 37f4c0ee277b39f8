-- Fixed window (docs/spec.md section 3): one counter per aligned window.
--
-- fixed_window(key, tick, W, L); the key holds (w, c) packed as '<dd' (see
-- the prelude): w = start of the window of the last admission (ticks), c =
-- units admitted in it.
-- Called as the prelude describes: decides without writing, and returns
-- (allowed, remaining, retry_after, reset_after, reset_now, wait, t_eff,
-- write, and write's arguments) in ticks, t_eff = max(t div q, T_s).
--
-- Every value stays below 2^53, exact in Lua's doubles. An admission leaves
-- the key a TTL of at least its reset_after (and the floor; see save).

local function fixed_window(key, tick, W, L)
  local t = floor(time_us / tick)
  local start_s, count_s = 0, 0
  local state = states[key]
  if state == decoded then
    local r = repeated[key]
    start_s, count_s = r[1], r[2]
  elseif state and (#state == 24 or #state == 32) then
    -- (A string of another length is none of ours: read as none, and
    -- written over, as a key of another type is.)
    start_s, count_s = unpack('<dd', state)
  end
  local t_eff = max(t, start_s)
  local e = t_eff - floor(t_eff / W) * W
  local start = t_eff - e
  local count = 0
  if start == start_s then count = count_s end
  local until_next = W - e
  local reset_now = 0
  if count > 0 then reset_now = until_next end
  if count + n <= L then
    local counted = count + n
    return true, L - counted, 0, until_next, reset_now, 0, t_eff,
      save, key, ttl_ms(tick, t, t_eff, until_next), start, counted
  end
  return false, L - count, until_next, reset_now, reset_now, 0, t_eff, nil
end
