-- A key's state taken over from the policy set it was made under (docs/spec.md
-- section 9): a port of limiter-core's KeyState::change_policy and
-- SetState::change_policies (crates/limiter-core/src/policy_change.rs),
-- computing the same integers (every value stays at or below 2^53, exact in
-- Lua's doubles), so that the state written is the bytes limiter-redis-module
-- writes with limiter-core's own code.
--
-- Every library has it. The generated function calls, per request:
--
--   take_over(set, record_key), called when the record beside the
--     request's state (record_key, `{prefix}:{{user_key}}:p`, see keys.rs)
--     holds another set than `set` (the library's own record, a literal),
--     or, when every part keeps a string, when foreign(key, held) says so
--     of the first part's state (below):
--     reads the state of each part of the record's set, takes it over for
--     each part of `set`, and puts it in states[key] for the algorithm
--     functions to decide on. An acquire (or a charge) writes it at once,
--     with a TTL of its reset under `set` (the decision's own write, if it
--     admits, comes after), deletes the keys of parts `set` does not have,
--     and writes the record; it returns nil. A peek writes nothing and
--     returns what to put back (restore) once it is decided. A missing
--     record beside no state, or beside a state of the set's own tag,
--     takes nothing over (the caller does not call). A missing record
--     beside a state of another set's tag (the record evicted), or a
--     record of another encoding version, says the states are none of
--     ours: each part starts fresh.
--   charge(set, record_key): counts a charge's units on every part (after
--     take_over, as a charge writes).
--   note_record(record_key, set), called when the request granted a TTL
--     (record_ms > 0): the record's TTL covers every TTL it granted. A
--     record missing, or of another set, is written, one held is extended
--     (PEXPIRE GT), so that it never expires before the state it names.
--
-- A record is a version byte, then per part an algorithm byte (0 fixed
-- window, 1 sliding log, 2 sliding counter, 3 token bucket, 4 leaky bucket)
-- and '<dddd': tick in µs, window in ticks, limit, maximum cost, as
-- limiter-core's encode_policy_record writes it (backend/policy_record.rs,
-- RECORD_VERSION its POLICY_RECORD_VERSION). A part's
-- state lives at `{prefix}:{{user_key}}:{position}`, a repeated policy at
-- its first occurrence's position.

local RECORD_VERSION = 2
local PART_BYTES = 33
local EXACT_LIMIT = 9007199254740992

-- The parts of a record, or nil when its version is not ours.
local function parts_of(record)
  if #record < 1 + PART_BYTES or (#record - 1) % PART_BYTES ~= 0 then return nil end
  if unpack('<B', record) ~= RECORD_VERSION then return nil end
  local parts, seen = {}, {}
  for at = 2, #record, PART_BYTES do
    local code, tick, W, L, M = unpack('<Bdddd', record, at)
    local bytes = string.sub(record, at, at + PART_BYTES - 1)
    local position = seen[bytes]
    if not position then
      position = #parts
      seen[bytes] = position
    end
    local F = W
    if code >= 3 then F = ceil_div(M * W, L) end
    -- A sliding log above 128 (state.rs, PACKED_LOG_MAX) keeps a sorted set.
    parts[#parts + 1] = {code = code, tick = tick, W = W, L = L, M = M, F = F,
      position = position, sorted = code == 1 and L > 128}
  end
  return parts
end

-- A fresh state of part p, in the form the functions below use: a fixed
-- window {start, count}, a sliding counter {start, previous, current}, a
-- bucket {scaled, last}, a sliding log {entries = {{ts, total}...}} (the
-- edge's entry first when one was dropped before it).
local function fresh_state(p)
  if p.code == 1 then return {entries = {}} end
  if p.code == 2 then return {0, 0, 0} end
  if p.code == 3 then return {p.M * p.W, 0} end
  return {0, 0}
end

-- The state of part p held at key: from the call's read of it, or read now.
local function read_state(p, key)
  if p.sorted then
    local range = redis.pcall('ZRANGE', key, '0', '-1', 'WITHSCORES')
    local entries = {}
    if not range.err then
      for i = 1, #range, 2 do
        entries[#entries + 1] = {tonumber(range[i + 1]), tonumber(range[i])}
      end
    end
    return {entries = entries}
  end
  local value = states[key]
  if value == nil then
    local read = redis.pcall('GET', key)
    if type(read) == 'string' then value = read else value = false end
  end
  if value == decoded then
    local r = repeated[key]
    if p.code == 2 then return {r[1], r[2], r[3]} end
    return {r[1], r[2]}
  end
  if not value then return fresh_state(p) end
  if p.code == 1 then
    local size = (#value - 16) / 14
    if size < 0 or size % 1 ~= 0 then return fresh_state(p) end
    local entries = {}
    for i = 1, size do
      local ts, total = unpack('<I7I7', value, 9 + 14 * (i - 1))
      entries[i] = {ts, total}
    end
    return {entries = entries}
  end
  if p.code == 2 then
    if #value ~= 32 and #value ~= 40 then return fresh_state(p) end
    local a, b, c = unpack('<ddd', value)
    return {a, b, c}
  end
  if #value ~= 24 and #value ~= 32 then return fresh_state(p) end
  local a, b = unpack('<dd', value)
  return {a, b}
end

-- T_s in ticks.
local function stamp_of(p, st)
  if p.code == 1 then
    local entries = st.entries
    if #entries == 0 then return 0 end
    return entries[#entries][1]
  end
  if p.code >= 3 then return st[2] end
  return st[1]
end

-- A sliding counter's counts rolled forward to tick t.
local function rolled(st, W, t)
  local start = t - t % W
  if start == st[1] then return st[2], st[3] end
  if start - st[1] == W then return st[3], 0 end
  return 0, 0
end

-- A bucket's level at tick t: tokens refilled, or the queue drained.
local function level(p, st, t)
  local elapsed = min(t - st[2], p.F)
  if p.code == 3 then return min(p.M * p.W, st[1] + elapsed * p.L) end
  return max(st[1] - elapsed * p.L, 0)
end

-- A sliding log's entries in the window of tick t, as {ts, units}.
local function in_window(p, st, t)
  local entries, edge = st.entries, t - p.W
  local expired = 0
  if edge >= 0 then
    while expired < #entries and entries[expired + 1][1] <= edge do expired = expired + 1 end
  end
  local before = 0
  if expired > 0 then before = entries[expired][2] end
  local out = {}
  for i = expired + 1, #entries do
    out[#out + 1] = {entries[i][1], entries[i][2] - before}
    before = entries[i][2]
  end
  return out
end

-- Ticks until the state is back to its initial state, at t (>= its stamp).
local function reset_ticks(p, st, t)
  local W = p.W
  if p.code == 0 then
    local start = t - t % W
    if start == st[1] and st[2] > 0 then return start + W - t end
    return 0
  elseif p.code == 1 then
    local entries = st.entries
    if #entries > 0 and entries[#entries][1] + W > t then return entries[#entries][1] + W - t end
    return 0
  elseif p.code == 2 then
    local prev, curr = rolled(st, W, t)
    local e = t % W
    if curr > 0 then return 2 * W - e end
    if prev > 0 then return W - e end
    return 0
  elseif p.code == 3 then
    return ceil_div(p.M * W - level(p, st, t), p.L)
  end
  return ceil_div(level(p, st, t), p.L)
end

-- The units the state counts at tick t (docs/spec.md rule 9.2.2).
local function used(p, st, t)
  local W = p.W
  if p.code == 0 then
    if t - t % W == st[1] then return st[2] end
    return 0
  elseif p.code == 1 then
    local units = 0
    for _, entry in ipairs(in_window(p, st, t)) do units = units + entry[2] end
    return units
  elseif p.code == 2 then
    local prev, curr = rolled(st, W, t)
    return min(ceil_div(prev * (W - t % W) + curr * W, W), p.L)
  elseif p.code == 3 then
    return ceil_div(p.M * W - level(p, st, t), W)
  end
  return ceil_div(level(p, st, t), W)
end

-- to's tick holding the last µs of from's tick t.
local function tick_in(from, t, to)
  return floor(((t + 1) * from.tick - 1) / to.tick)
end

-- The stamp of a bucket of `to` at its tick `at` owing `excess`.
local function paid_back(to, at, excess)
  local debt = min(excess, to.M * to.W)
  return min(at + ceil_div(debt, to.L), max(floor(EXACT_LIMIT / to.tick), at))
end

-- A log of {ts, units} entries as {ts, total} entries from 0, entries at
-- one tick merged (limiter-core's SlidingLog::from_entries).
local function log_of(units)
  local entries, total = {}, 0
  for _, entry in ipairs(units) do
    total = total + entry[2]
    local last = entries[#entries]
    if last and last[1] == entry[1] then
      last[2] = total
    else
      entries[#entries + 1] = {entry[1], total}
    end
  end
  return {entries = entries}
end

-- to's state after `units` admitted at its tick `at` (rule 9.2.4).
local function carried(to, units, at)
  if units == 0 then return fresh_state(to) end
  local W = to.W
  local kept = min(units, to.M)
  local excess = min(units - kept, to.M) * W
  local start = at - at % W
  if to.code == 0 then return {start, kept} end
  if to.code == 1 then return log_of({{at, kept}}) end
  if to.code == 2 then return {start, 0, kept} end
  if to.code == 3 then return {(to.M - kept) * W, paid_back(to, at, excess)} end
  return {kept * W, paid_back(to, at, excess)}
end

-- The state `from` made (st) as `to` takes it over at now_us (rule 9.2).
local function change_policy(st, from, to, now_us)
  local t = max(floor(min(now_us, EXACT_LIMIT) / from.tick), stamp_of(from, st))
  if reset_ticks(from, st, t) == 0 then return fresh_state(to) end
  local same_scale = from.W == to.W and from.tick == to.tick
  if from.code == 1 and to.code == 1 then
    local mapped = {}
    for _, entry in ipairs(in_window(from, st, t)) do
      mapped[#mapped + 1] = {tick_in(from, entry[1], to), entry[2]}
    end
    -- The newest units up to to's limit, the oldest dropped first.
    local room, newest = to.L, {}
    for i = #mapped, 1, -1 do
      if room == 0 then break end
      local units = min(mapped[i][2], room)
      room = room - units
      table.insert(newest, 1, {mapped[i][1], units})
    end
    return log_of(newest)
  end
  if same_scale and from.code == to.code then
    local W = to.W
    if to.code == 2 then
      local prev, curr = rolled(st, W, t)
      if prev <= to.L and curr <= to.L then return {t - t % W, prev, curr} end
    elseif to.code == 3 then
      local full = to.M * W
      local spent = from.M * W - level(from, st, t)
      return {max(full - spent, 0), paid_back(to, t, max(spent - full, 0))}
    elseif to.code == 4 then
      local full, queued = to.M * W, level(from, st, t)
      return {min(queued, full), paid_back(to, t, max(queued - full, 0))}
    end
  end
  return carried(to, used(from, st, t), tick_in(from, t, to))
end

-- The part of `from` that part `to` takes its state from (rule 9.3).
local function source_part(from, to)
  local best, best_window, best_other
  for i, p in ipairs(from) do
    local window, other = p.W * p.tick, p.code ~= to.code
    if window >= to.W * to.tick and (not best or window < best_window
        or (window == best_window and best_other and not other)) then
      best, best_window, best_other = i, window, other
    end
  end
  if best then return best end
  for i, p in ipairs(from) do
    local window, other = p.W * p.tick, p.code ~= to.code
    if not best or window > best_window or (window == best_window and best_other and not other) then
      best, best_window, best_other = i, window, other
    end
  end
  return best
end

-- A state as the string part p's function reads (a sorted set's log as
-- packed_log reads it, for a peek).
local function encoded(p, st)
  if p.code == 1 then
    local records = {pack('<d', 0)}
    for _, entry in ipairs(st.entries) do records[#records + 1] = pack('<I7I7', entry[1], entry[2]) end
    records[#records + 1] = TAG
    return concat(records)
  end
  if p.code == 2 then return pack('<dddc8', st[1], st[2], st[3], TAG) end
  return pack('<ddc8', st[1], st[2], TAG)
end

-- Writes state st of part p at key now, with a TTL of its reset (ms,
-- returned): a string with no deadline (the next write that admits sets
-- one, see save), or a sorted set anew.
local function put_state(p, key, st)
  local t = floor(time_us / p.tick)
  local t_eff = max(t, stamp_of(p, st))
  local ms = ttl_ms(p.tick, t, t_eff, reset_ticks(p, st, t_eff))
  if p.sorted then
    redis.call('DEL', key)
    for _, e in ipairs(st.entries) do redis.call('ZADD', key, digits(e[1]), digits(e[2])) end
    if #st.entries > 0 then redis.call('PEXPIRE', key, digits(ms)) end
  else
    local value = encoded(p, st)
    redis.call('SET', key, value, 'PX', digits(ms))
    states[key] = value
    if repeated and repeated[key] then repeated[key] = {held = value} end
  end
  return ms
end

-- Whether a request whose every part keeps a string, the first at key,
-- beside the record held (false or nil: none), takes its state over: not
-- when that state is the library's set's (put by this call, or ending with
-- TAG: every string state ends with its set's tag, see the prelude),
-- whatever the record says, as limiter-redis-module decides without
-- reading the record; else when the record is another set's, or missing
-- beside a string (another set's state, whose record was evicted: none
-- of ours, each part fresh). Called only when held is not the library's
-- own record.
local function foreign(key, held)
  local value = states[key]
  if value == decoded or (value and string.sub(value, -8) == TAG) then return false end
  if held then return true end
  return type(value) == 'string'
end

local function take_over(set, record_key)
  local held = states[record_key]
  local writes = acquire or charging
  local base = string.sub(record_key, 1, -2)
  local from, to = held and parts_of(held), parts_of(set)
  local taken = {}
  for j, p in ipairs(to) do
    local st
    if from then
      local i = source_part(from, p)
      st = change_policy(read_state(from[i], base .. from[i].position), from[i], p, time_us)
    else
      st = fresh_state(p)
    end
    taken[p.position] = {p, st}
  end
  local undo = nil
  if not writes then undo = {} end
  local grant = 0
  for position, entry in pairs(taken) do
    local p, st = entry[1], entry[2]
    local key = base .. position
    if writes then
      grant = max(grant, put_state(p, key, st))
    else
      undo[#undo + 1] = {key, states[key]}
      states[key] = encoded(p, st)
      if p.sorted then taken_logs[key] = true end
    end
  end
  if writes then
    if from then
      for _, p in ipairs(from) do
        if not taken[p.position] then redis.call('DEL', base .. p.position) end
      end
    end
    redis.call('SET', record_key, set, 'PX', digits(grant))
    states[record_key] = set
  end
  return undo
end

-- Puts back what a peek's take_over put in states.
local function restore(undo)
  for i = #undo, 1, -1 do
    states[undo[i][1]] = undo[i][2]
    taken_logs[undo[i][1]] = nil
  end
end

-- The stamp of a bucket of p at tick t that owes `owed` (scaled units)
-- after a charge at now_us (limiter-core's in_debt).
local function in_debt(p, now_us, t, owed)
  local latest = min(floor(now_us / p.tick) + p.F, floor(EXACT_LIMIT / p.tick))
  return max(min(t + ceil_div(owed, p.L), latest), t)
end

-- State st of part p after a charge of `charged` units at now_us (docs/spec.md
-- rule 10.1, limiter-core's KeyState::charge).
local function charged_state(p, st, now_us, charged)
  local W, L, M = p.W, p.L, p.M
  local t = max(floor(now_us / p.tick), stamp_of(p, st))
  charged = min(charged, 2 * M)
  local start = t - t % W
  if p.code == 0 then
    local count = 0
    if st[1] == start then count = st[2] end
    return {start, min(count + charged, L)}
  elseif p.code == 1 then
    local entries = in_window(p, st, t)
    entries[#entries + 1] = {t, charged}
    local room, newest = L, {}
    for i = #entries, 1, -1 do
      if room == 0 then break end
      local kept = min(entries[i][2], room)
      room = room - kept
      table.insert(newest, 1, {entries[i][1], kept})
    end
    return log_of(newest)
  elseif p.code == 2 then
    local prev, curr = rolled(st, W, t)
    return {start, prev, min(curr + charged, L)}
  elseif p.code == 3 then
    local tokens, need = level(p, st, t), charged * W
    return {max(tokens - need, 0), in_debt(p, now_us, t, max(need - tokens, 0))}
  end
  local queued = level(p, st, t) + charged * W
  return {min(queued, M * W), in_debt(p, now_us, t, max(queued - M * W, 0))}
end

-- Charges `units` (the request's) to every part of `set` on the request's
-- keys (its record's, less the 'p', and each part's position), writing
-- each part's state with a TTL of its reset (docs/spec.md section 10).
local function charge(set, record_key)
  local base = string.sub(record_key, 1, -2)
  local done = {}
  for _, p in ipairs(parts_of(set)) do
    if not done[p.position] then
      done[p.position] = true
      local key = base .. p.position
      granted(put_state(p, key, charged_state(p, read_state(p, key), time_us, units)))
    end
  end
end

local function note_record(record_key, set)
  if record_ms == 0 then return end
  if states[record_key] ~= set then
    redis.call('SET', record_key, set, 'PX', digits(record_ms))
    states[record_key] = set
  else
    redis.call('PEXPIRE', record_key, digits(record_ms), 'GT')
  end
  record_ms = 0
end
