-- Token bucket (docs/spec.md section 3): bursts up to a capacity C, refilled at L
-- tokens per window W. A fresh key is full.
--
-- token_bucket(key, tick, W, L, C, F), F = ceil(C*W / L) the ticks to fill
-- from empty; the key holds (s, l) packed as '<dd' (see the prelude): s =
-- tokens scaled by W (so refilling L per tick is exact), l = tick of the
-- last admission.
-- Called as the prelude describes: decides without writing, and returns
-- (allowed, remaining, retry_after, reset_after, reset_now, wait, t_eff,
-- write, and write's arguments) in ticks, t_eff = max(t div q, T_s).
--
-- Every value stays below 2^53 (4*C*W <= 2^53 by the choice of tick; the
-- refill is capped at the time to fill from empty), exact in Lua's doubles.
-- An admission leaves the key a TTL of at least its reset_after, the time
-- to refill (and the floor; see save).

local function token_bucket(key, tick, W, L, C, F)
  local t = floor(time_us / tick)
  local full = C * W
  local s, last = full, 0
  local state = states[key]
  if state == decoded then
    local r = repeated[key]
    s, last = r[1], r[2]
  elseif state and (#state == 24 or #state == 32) then
    -- (A string of another length is none of ours: read as none, and
    -- written over, as a key of another type is.)
    s, last = unpack('<dd', state)
  end
  local t_eff = t
  if last > t then t_eff = last end
  -- Past the time to refill from empty (F), more elapsed time changes
  -- nothing; the cap keeps elapsed * L in range.
  local elapsed = t_eff - last
  if elapsed > F then elapsed = F end
  s = s + elapsed * L
  if s > full then s = full end
  local need = n * W
  -- ceil_div written out on the admitted path: each Lua call costs Redis
  -- more than the arithmetic it does (measured, docs/benchmarks.md).
  local reset_now = floor((full - s) / L)
  if reset_now * L < full - s then reset_now = reset_now + 1 end
  if s >= need then
    local left = s - need
    local reset_after = floor((full - left) / L)
    if reset_after * L < full - left then reset_after = reset_after + 1 end
    return true, floor(left / W), 0, reset_after, reset_now, 0, t_eff,
      save, key, ttl_ms(tick, t, t_eff, reset_after), left, t_eff
  end
  return false, floor(s / W), ceil_div(need - s, L), reset_now, reset_now, 0, t_eff, nil
end
