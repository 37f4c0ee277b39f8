-- Leaky bucket (docs/spec.md section 3): a queue of at most Q units that drains L
-- units per window W. A fresh key is empty.
--
-- leaky_bucket(key, tick, W, L, Q, F), F = ceil(Q*W / L) the ticks to
-- drain from full; the key holds (s, l) packed as '<dd' (see the prelude):
-- s = queued units scaled by W, l = tick of the last admission.
-- Called as the prelude describes: decides without writing, and returns
-- (allowed, remaining, retry_after, reset_after, reset_now, wait, t_eff,
-- write, and write's arguments) in ticks, t_eff = max(t div q, T_s).
--
-- Every value stays below 2^53 (4*Q*W <= 2^53 by the choice of tick; the
-- drain is capped at the time to drain from full), exact in Lua's doubles.
-- An admission leaves the key a TTL of at least its reset_after, the time
-- to drain (and the floor; see save).

local function leaky_bucket(key, tick, W, L, Q, F)
  local t = floor(time_us / tick)
  local full = Q * W
  local s, last = 0, 0
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
  -- Past the time to drain from full (F), more elapsed time changes
  -- nothing; the cap keeps elapsed * L in range.
  local elapsed = t_eff - last
  if elapsed > F then elapsed = F end
  s = s - elapsed * L
  if s < 0 then s = 0 end
  local need = n * W
  -- ceil_div written out on the admitted path: each Lua call costs Redis
  -- more than the arithmetic it does (measured, docs/benchmarks.md). The
  -- wait, the time to drain what is queued, is the reset as it stands.
  local reset_now = floor(s / L)
  if reset_now * L < s then reset_now = reset_now + 1 end
  if s + need <= full then
    local queued = s + need
    local reset_after = floor(queued / L)
    if reset_after * L < queued then reset_after = reset_after + 1 end
    return true, floor((full - queued) / W), 0, reset_after, reset_now, reset_now, t_eff,
      save, key, ttl_ms(tick, t, t_eff, reset_after), queued, t_eff
  end
  return false, floor((full - s) / W), ceil_div(s + need - full, L), reset_now, reset_now, 0,
    t_eff, nil
end
