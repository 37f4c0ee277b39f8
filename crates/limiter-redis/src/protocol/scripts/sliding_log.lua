-- Sliding log (docs/spec.md section 3): every admission in the trailing window
-- (t_eff - W, t_eff], exactly.
--
-- sliding_log(key, tick, W, L); the key holds a sorted set of admissions:
-- score = tick of the admission, member = running total of units admitted
-- by the key up to and including it (so members are unique even within one
-- tick, and counting a window is a subtraction, not a walk). Admissions at
-- the same tick share one entry. When admitting, entries before the window
-- are dropped except the newest of them, which keeps the total at the
-- window's edge. Totals never pass 2^53: an admission that would carry the
-- newest total past it first rewrites every member as its total minus the
-- edge total (a rebase, as the Rust core does), which brings the newest
-- down to the window's count.
-- Called as the prelude describes: decides without writing, and returns
-- (allowed, remaining, retry_after, reset_after, reset_now, wait, t_eff,
-- write, and write's arguments) in ticks, t_eff = max(t div q, T_s), T_s =
-- the newest admission.
--
-- Every value stays below 2^53, exact in Lua's doubles. A denial writes
-- nothing (not even the dropping of old entries); an admission sets the
-- key's TTL to its reset_after, W (at least the floor).
--
-- A key that holds another type than a sorted set fails its first read
-- (WRONGTYPE): the request is then not decided, with t_eff = -1 (the wire
-- format's mark of it) and nothing written, and the call goes on with its
-- other requests, so one such key fails its own requests alone.

-- Commits an admission of n at t_eff on key (see sliding_log): drops the
-- entries before base_ts (its text; false: none to drop), removes the
-- member drop (the newest entry when it is at t_eff, else false), adds the
-- new total, and sets the TTL.
local function sl_write(key, base_ts, drop, newest_total, t_eff, ttl)
  if base_ts then
    -- Below base_ts, as Redis wrote it (its exact digits: no number to
    -- write again).
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. base_ts)
  end
  if drop then
    redis.call('ZREM', key, drop)
  end
  -- 2^53 - n is exact; newest_total + n would not be once past 2^53.
  local total_before = newest_total
  if total_before > 9007199254740992 - n then
    -- Rebase: at most min(L, W) members, and rare (the next rebase waits
    -- for 2^53 - L more units). The oldest entry left is the edge's (or,
    -- with none dropped ever, the first: base 0), and every kept total is
    -- at least base.
    local kept = redis.call('ZRANGE', key, '0', '-1', 'WITHSCORES')
    local base = 0
    if base_ts then base = tonumber(kept[1]) end
    redis.call('DEL', key)
    for i = 1, #kept, 2 do
      redis.call('ZADD', key, kept[i + 1], digits(tonumber(kept[i]) - base))
    end
    total_before = newest_total - base
  end
  redis.call('ZADD', key, digits(t_eff), digits(total_before + n))
  expire(key, ttl)
end

local function sliding_log(key, tick, W, L)
  if taken_logs[key] then return packed_log(key, tick, W, L) end
  local t = floor(time_us / tick)
  -- The newest entry: T_s and the running total.
  local newest = redis.pcall('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if newest.err then return false, 0, 0, 0, 0, 0, -1 end
  local newest_total, newest_ts = 0, 0
  if newest[1] then
    newest_total = tonumber(newest[1])
    newest_ts = tonumber(newest[2])
  end
  local t_eff = max(t, newest_ts)

  -- The total at the window's edge: that of the newest entry at or before
  -- t_eff - W, or 0 when every entry is inside the window (then the oldest
  -- entry is the key's first: no entry was ever dropped).
  local edge = t_eff - W
  local base, base_ts = 0, nil
  if edge >= 0 then
    local before = redis.call('ZREVRANGEBYSCORE', key, digits(edge), '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
    if before[1] then
      base = tonumber(before[1])
      base_ts = before[2]
    end
  end
  local count = newest_total - base
  -- W - (t_eff - ts) rather than ts + W - t_eff: no intermediate exceeds
  -- 2^53 (ts + W may, near the end of the range), and t_eff >= every ts.
  local reset_now = 0
  if count > 0 then reset_now = W - (t_eff - newest_ts) end

  if count + n <= L then
    return true, L - count - n, 0, W, reset_now, 0, t_eff,
      sl_write, key, base_ts or false, newest_ts == t_eff and newest[1], newest_total, t_eff,
      ttl_ms(tick, t, t_eff, W)
  end

  -- Denied: the oldest entries leave first. Find the first entry whose
  -- total reaches base + need (totals grow with rank). The newest entry
  -- does (need <= count, since n <= L), so the answer is in [lo, hi] with
  -- total(lo) < target <= total(hi). Each step guesses the rank by
  -- interpolating the totals (exact in one or two steps when admissions
  -- have similar costs: one ZRANGE each), and bisects instead whenever the
  -- last guess did not halve the range, so a denial costs O(log n) steps
  -- at worst. The guess may be inexact in doubles; it is only a guess,
  -- clamped inside the range, and never decides.
  -- need = count + n - L first: base + count + n may pass 2^53 and round.
  local target = base + (count + n - L)
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  local lo, lo_total = 0, tonumber(first[1])
  local hi, hi_total, hi_ts = redis.call('ZCARD', key) - 1, newest_total, newest_ts
  if lo_total >= target then
    hi, hi_ts = 0, tonumber(first[2])
  end
  local bisect = false
  while hi - lo > 1 do
    local mid
    if bisect then
      mid = floor((lo + hi) / 2)
    else
      mid = lo + ceil_div((target - lo_total) * (hi - lo), hi_total - lo_total)
      if mid <= lo then mid = lo + 1 elseif mid >= hi then mid = hi - 1 end
    end
    local before = hi - lo
    local at = digits(mid)
    local entry = redis.call('ZRANGE', key, at, at, 'WITHSCORES')
    local total = tonumber(entry[1])
    if total < target then
      lo, lo_total = mid, total
    else
      hi, hi_total, hi_ts = mid, total, tonumber(entry[2])
    end
    bisect = (hi - lo) * 2 > before
  end
  return false, L - count, W - (t_eff - hi_ts), reset_now, reset_now, 0, t_eff, nil
end
