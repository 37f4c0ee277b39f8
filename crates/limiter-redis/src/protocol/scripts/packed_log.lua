-- Sliding log of a small limit (docs/spec.md section 3): every admission in
-- the trailing window (t_eff - W, t_eff], exactly, as sliding_log.lua
-- decides it, with the log in one string instead of a sorted set.
--
-- packed_log(key, tick, W, L), for L <= 128 (state.rs, PACKED_LOG_MAX);
-- the key holds a string: the server time (ms) its TTL runs out at, a
-- little before it does ('<d', 0 when unknown: see save in the prelude),
-- then one 14-byte record per tick with admissions, oldest first, packed
-- as '<I7I7': the tick and the running total of units admitted by the key
-- up to and including it (so counting a window is a subtraction), then
-- TAG, as every string state (the prelude). A log
-- holds at most L + 1 records (the window's and the edge's). The string
-- is read with the call's one MGET and written with one SET (or SETRANGE
-- in place when its length holds), at the call's end when it decides the
-- key again (defer, in the prelude): a decision makes at most one
-- redis.call of its own where the sorted set makes four or five, each
-- costing Redis more than the arithmetic here (and the sorted set's
-- scores are written by Redis with '%.17g', then parsed).
-- The string's copies (read, rebuilt, written, replicated whole) grow
-- with it: measured against the sorted set (docs/benchmarks.md, "Why
-- 128"), it wins up to 128 records and loses from about 500 when
-- decisions spread over keys, so larger limits keep sliding_log.lua.
--
-- Called as the prelude describes: decides without writing, and returns
-- (allowed, remaining, retry_after, reset_after, reset_now, wait, t_eff,
-- write, and write's arguments) in ticks, t_eff = max(t div q, T_s), T_s =
-- the newest admission. When admitting, records before the window are
-- dropped except the newest of them, which keeps the total at the window's
-- edge; admissions at the same tick share one record. Totals never pass
-- 2^53: an admission that would carry the newest total past it first
-- rewrites every kept total minus the edge total (a rebase, as the Rust
-- core does). Every value stays below 2^53, exact in Lua's doubles and in
-- 7 bytes. A denial writes nothing.

-- Record i (1-based) of a log string: its tick and running total.
local function pl_record(log, i)
  return unpack('<I7I7', log, 9 + 14 * (i - 1))
end

-- Commits an admission of n at t_eff on key (see packed_log): keeps the
-- records from the edge's (e, or every one when e is 0) on, replaces the
-- newest record (at newest_ts, of newest_total) when it is at t_eff,
-- appends the new total, and makes sure the key's TTL lasts ms, as save
-- does for the other string states.
local function pl_write(key, e, newest_ts, newest_total, t_eff, ms)
  local old = states[key] or ''
  local size = (#old - 16) / 14
  if size < 0 then size = 0 end
  local first, last = e, size
  if first < 1 then first = 1 end
  if size > 0 and newest_ts == t_eff then last = size - 1 end
  local total, kept = newest_total, nil
  -- 2^53 - n is exact; total + n would not be once past 2^53.
  if total > 9007199254740992 - n then
    -- Rebase: the oldest record kept is the edge's (or, with none dropped
    -- ever, the first: base 0), and every kept total is at least base.
    local base, parts = 0, {}
    if e >= 1 then
      local _, edge_total = pl_record(old, e)
      base = edge_total
    end
    for i = first, last do
      local ts, t_total = pl_record(old, i)
      parts[#parts + 1] = pack('<I7I7', ts, t_total - base)
    end
    kept = concat(parts)
    total = total - base
  else
    kept = string.sub(old, 9 + 14 * (first - 1), 8 + 14 * last)
  end
  -- save's TTL rule (the prelude), written out: sharing it through helper
  -- functions would cost every string state's decision two Lua calls per
  -- write.
  local grant, deadline = nil, 0
  if not server_us then
    -- A caller's clock: every write sets the TTL.
    grant = ms
  else
    if #old >= 8 then deadline = unpack('<d', old) end
    if deadline < server_ms + ms then
      grant = ms + max(ms, 1000)
      deadline = server_ms + grant - 5
    end
  end
  if grant then granted(grant) end
  -- One concatenation: one new string.
  local value = pack('<d', deadline) .. kept .. pack('<I7I7c8', t_eff, total + n, TAG)
  states[key] = value
  local r = repeated and repeated[key]
  if r then
    defer(r, grant)
  elseif grant then
    redis.call('SET', key, value, 'PX', digits(grant))
  elseif #value == #old then
    redis.call('SETRANGE', key, '0', value)
  else
    redis.call('SET', key, value, 'KEEPTTL')
  end
end

local function packed_log(key, tick, W, L)
  local t = floor(time_us / tick)
  local log = states[key] or ''
  local size = (#log - 16) / 14
  if size < 0 or size % 1 ~= 0 then
    -- None of ours (a string of another length): read as none, and
    -- written over, as a key of another type is.
    log, size = '', 0
    states[key] = nil
  end
  local newest_ts, newest_total = 0, 0
  if size > 0 then newest_ts, newest_total = pl_record(log, size) end
  local t_eff = newest_ts
  if t > t_eff then t_eff = t end

  -- The edge record: the newest at or before t_eff - W (e, 0 for none; then
  -- every record is inside the window and none was ever dropped), whose
  -- total (base) is the count at the window's edge. Admissions drop the
  -- records before it, so it is nearly always the first or the second.
  local edge = t_eff - W
  local e, base = 0, 0
  if size > 0 then
    -- The first two records in one unpack.
    local t1, c1, t2, c2
    if size > 1 then
      t1, c1, t2, c2 = unpack('<I7I7I7I7', log, 9)
    else
      t1, c1 = unpack('<I7I7', log, 9)
    end
    if t1 <= edge then
      e, base = 1, c1
      if size > 1 and t2 <= edge then
        e, base = 2, c2
        if size > 2 and pl_record(log, 3) <= edge then
          -- Records 3..size: the last whose tick is at most edge.
          local lo, hi = 3, size
          while lo < hi do
            local mid = floor((lo + hi + 1) / 2)
            if pl_record(log, mid) <= edge then lo = mid else hi = mid - 1 end
          end
          local _, edge_total = pl_record(log, lo)
          e, base = lo, edge_total
        end
      end
    end
  end
  -- The count, and the reset as it stands, exactly as sliding_log.lua
  -- works them out.
  local count, reset_now = newest_total - base, 0
  if count > 0 then reset_now = W - (t_eff - newest_ts) end

  if count + n <= L then
    return true, L - count - n, 0, W, reset_now, 0, t_eff,
      pl_write, key, e, newest_ts, newest_total, t_eff, ttl_ms(tick, t, t_eff, W)
  end

  -- Denied: the oldest admissions leave first. The first record whose
  -- total reaches base + need is after the edge's (need >= 1), and the
  -- newest does (need <= count, since n <= L): bisect (e, size] on totals.
  -- need = count + n - L first: base + count + n may pass 2^53 and round.
  local target = base + (count + n - L)
  local lo, hi, hi_ts = e, size, newest_ts
  while hi - lo > 1 do
    local mid = floor((lo + hi) / 2)
    local ts, total = pl_record(log, mid)
    if total < target then lo = mid else hi, hi_ts = mid, ts end
  end
  return false, L - count, W - (t_eff - hi_ts), reset_now, reset_now, 0, t_eff, nil
end
