-- Prelude shared by every function library in this folder. The Rust side
-- loads, as one Redis Functions library per policy (or policy set):
--
--   #!lua name=limiter_<digest>
--   local ttl_floor = ...      the TTL floor in ms (0 with Redis TIME)
--   this prelude
--   the file of each algorithm the policies use (each defines one function)
--   one function, limiter_<digest>, calling them with each policy's
--   constants, in the text rather than in ARGV (Redis spends more
--   receiving and converting arguments than on some of the algorithms'
--   arithmetic), and building the reply; registered twice: as is, and as
--   limiter_<digest>_peek with the no-writes flag, for calls that only
--   peek (acquire 0 for every request: they write nothing), which Redis
--   runs even when full (maxmemory reached).
--
-- A library is loaded once (FUNCTION LOAD) and its functions live on: unlike
-- an EVALSHA script, nothing here is run again per call, so the helpers
-- below are created once, not on every decision.
--
-- One call decides a batch of R requests, in order (docs/backends.md,
-- "Batches"): the decisions that reached the client while earlier ones were
-- in flight, each on P policies. Its KEYS, ARGV and reply are laid out as
-- the table in wire.rs says (the one place they are defined);
-- scripts/generated/ holds the generated part of a few libraries. ARGV[1] packs every request's three numbers into one
-- argument: Redis makes an object of every argument and Lua a string, and
-- three per request cost about as much as reading one packed string; a hot
-- key's batch sends its P keys once, so Redis parses, and MGET reads, P
-- keys rather than R*P.
--
-- Each request passes P+1 keys: its state under each of the P parts,
-- then the record of the policies that state was made under (keys.rs),
-- which policy_change.lua, after the algorithms, reads to take a state
-- made under other policies over (docs/spec.md section 9) and writes.
--
-- It defines, for the algorithms that follow: start(KEYS, ARGV, P,
-- prefetch), which each call starts with (prefetch: read every string
-- state of the call up front, when some part keeps one) and which returns
-- the call's keys, the index before its first and the step between
-- requests (request r's key under the i-th policy is keys[base +
-- (r-1)*step + i]; keys is KEYS, or ARGV for a batch over several slots;
-- step is P, or 0 when every request is on the same keys), or nil when
-- such a batch reads a key this node does not serve now: the call then
-- writes nothing and answers 0;
-- begin(r), which request r starts with (the first only, when uniform) and
-- which sets acquire, n and time_us (Redis TIME is read once per call: the
-- call is atomic, its requests are simultaneous); requests, their number,
-- and uniform; states[key] (a string state as this call last left it:
-- every key of the call is read up front when some part keeps a string);
-- decoded, what states[key] is for a repeated key once the call has put
-- its state: the fields are then repeated[key][1..3] (save's a, b, c),
-- packed once by flush;
-- floor,
-- min, max, ceil (math's, bound as locals on the first call: a library's
-- top level may not touch math, and a local costs less than a global
-- lookup per use); concat (table's); digits(x) (the text a number goes
-- to redis.call as, below);
-- pack and unpack (struct's: the string states are two or three
-- little-endian doubles, '<dd' or '<ddd', exact for integers below 2^53 and
-- far cheaper for Redis's Lua than formatting and matching text, then, with
-- Redis TIME, a deadline (see save), then TAG: the 8-byte tag of the
-- record of the set that made them, limiter-core's policy_record_tag,
-- which the library's first lines hold); spread
-- (Lua's own unpack, of a table); ceil_div;
-- ttl_ms(tick, t, t_eff, reset_after) (a key's TTL after an admission, in
-- ms); save(key, ms, a, b[, c]) (a string state of two or three fields,
-- with a TTL of at least ms; a key the call decides more than once,
-- repeated[key], is written when it ends: save keeps its fields as
-- numbers (see decoded), defer(repeated[key], grant) notes a new string
-- value in states and its TTL, and flush(), the call's last step before
-- its reply, writes it) and expire(key, ms) (the TTL of a state kept in
-- another type).
--
-- Each algorithm's function takes (key, tick, W, L, max_cost, F) — the
-- tick q in µs (docs/spec.md section 5), the window W in ticks, the limit
-- L (for the buckets: units per window), the max cost (the capacity C for
-- the token bucket, the queue Q for the leaky bucket, L otherwise), and
-- the ticks a bucket takes to fill or drain, ceil(max_cost * W / L) —
-- decides the request without writing, and returns
--
--   allowed (boolean), remaining, retry_after, reset_after, reset_now,
--   wait, t_eff, write, write_a, ..., write_f
--
-- (the generated code's names for them, with the part's number after:
-- allowed_1, write_a_1...)
--
-- durations in the policy's ticks; reset_after is the key's reset after
-- the admission when allowed (docs/spec.md section 1), reset_now the reset
-- of its state as it stands (what a denied policy set reports for a part
-- that would have admitted, docs/spec.md section 7); write(write_a, ..., write_f)
-- commits the admission (write is nil when denied). A function and its
-- arguments rather than a closure: the string states commit with save
-- itself, and a closure made per decision costs Redis's Lua a share of the
-- whole decision (docs/benchmarks.md, "Server time per decision").

local floor, min, max, ceil, pack, unpack, concat, spread, format
local acquire, n, time_us, server_us, server_ms
-- A charge after the fact (mode 2, docs/spec.md section 10): charging is
-- true and units its units; the request's decision is then a peek of 1
-- (n) on the state it leaves, which the caller does not read.
local charging, units
-- This call's packed request arguments, their number, and whether one
-- set of arguments stands for every request.
local args, requests, uniform
-- The string states of this call's keys, by key: read by one MGET at the
-- start (a missing key, or one of another type, is false), then as each
-- save leaves them. One MGET of k keys costs Redis about half of k GETs
-- (each redis.call has its own overhead), and a key decided twice in one
-- call reads its first decision's write.
local states
-- The digits of the numbers this call passed to redis.call, by number:
-- a batch's requests share their time, window edge and TTL.
local texts
-- The keys this call decides more than once (a hot key's batch), found
-- as start reads them (nil when none), by key: the value Redis holds
-- (false when none), whether the call put a new one, and its last TTL
-- granted. Such a key is written, and replicated, once, when the call ends
-- (flush), rather than once per decision: each write is a redis.call,
-- which costs the server more than a decision's arithmetic, and a command
-- in the replication stream. Every other key is written as it is put.
local repeated
-- states[key] of a repeated key whose fields save keeps in repeated[key]:
-- a pack per decision (and the unpack of the next) costs Redis's Lua more
-- than a bucket's arithmetic (docs/benchmarks.md).
local decoded = {}
-- The longest TTL (ms) the current request granted a state key: the
-- record beside the state must last as long (policy_change.lua,
-- note_record).
local record_ms = 0
-- The keys of sorted-set logs whose state a peek took over from other
-- policies (policy_change.lua): in states[key] in packed form, decided by
-- packed_log, as a peek writes no sorted set.
local taken_logs = {}
-- Notes a TTL granted a state key.
local function granted(ms)
  if ms > record_ms then record_ms = ms end
end
-- Notes that the call reads key again, holding held.
local function again(key, held)
  if not repeated then repeated = {} end
  if not repeated[key] then repeated[key] = {held = held} end
end
local function start(KEYS, ARGV, P, prefetch)
  if not floor then
    -- digits needs a 64-bit long (Lua's '%d'): every call of a server
    -- without one fails, saying so, before anything is decided.
    if string.format('%d', 9007199254740992) ~= '9007199254740992' then
      error('limiter: this server formats integers in 32 bits; it needs a 64-bit build of Redis')
    end
    floor, min, max, ceil = math.floor, math.min, math.max, math.ceil
    pack, unpack = struct.pack, struct.unpack
    concat, spread, format = table.concat, _G.unpack, string.format
  end
  server_us = nil
  record_ms = 0
  args = ARGV[1]
  uniform = #args == 24 or #args == 32
  states = {}
  texts = {}
  repeated = nil
  if #ARGV == 1 then
    local step = P
    if #args == 32 then
      requests, step = unpack('<d', args, 25), 0
    else
      requests = #KEYS / P
    end
    if prefetch then
      local values = redis.call('MGET', spread(KEYS))
      for i = 1, #KEYS do
        local key = KEYS[i]
        local held = states[key]
        if held == nil then states[key] = values[i] else again(key, held) end
      end
      if step == 0 and requests > 1 then
        for i = 1, #KEYS do again(KEYS[i], states[KEYS[i]]) end
      end
    end
    return KEYS, 0, step
  end
  -- A batch over several slots (every part keeps a string): one MGET per
  -- request (its keys share a slot), all before any write. A key whose
  -- slot this node does not serve, or is moving away (a missing key) or
  -- into (without ASKING), fails its read: nothing is written, and the
  -- caller decides each request on its own, following the redirects. A
  -- read that succeeds means its key's writes will too (the call is
  -- atomic: no migration comes between).
  requests = (#ARGV - 1) / P
  for first = 2, #ARGV, P do
    if states[ARGV[first]] == nil then
      local values = redis.pcall('MGET', spread(ARGV, first, first + P - 1))
      if values.err then return nil end
      for i = 0, P - 1 do
        local key = ARGV[first + i]
        local held = states[key]
        if held == nil then states[key] = values[i + 1] else again(key, held) end
      end
    else
      for i = first, first + P - 1 do again(ARGV[i], states[ARGV[i]]) end
    end
  end
  return ARGV, 1, P
end

local function begin(r)
  local mode
  mode, n, time_us = unpack('<ddd', args, 24 * r - 23)
  acquire = mode == 1
  charging = mode == 2
  if charging then units, n = n, 1 end
  if time_us < 0 then
    if not server_us then
      local now = redis.call('TIME')
      server_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
      server_ms = floor(server_us / 1000)
    end
    time_us = server_us
  end
end

local function ceil_div(a, b)
  local q = floor(a / b)
  if q * b < a then q = q + 1 end
  return q
end
-- A number given to redis.call is written by Redis 7.0 with snprintf's
-- '%.17g', which for a 16-digit time costs the server about 2,700
-- instructions (a sliding log's admission passed eight: a third of its
-- whole cost). Every number passed is whole and below 2^53, so it goes as
-- digits(x) instead: string.format's '%d' (the same digits, exact: a long
-- holds it), once per call for each number. Never Lua's own '..', which
-- writes '%.14g' and rounds a 16-digit time. Constants go as literals.
local function digits(x)
  local text = texts[x]
  if not text then
    text = format('%d', x)
    texts[x] = text
  end
  return text
end

-- A key's TTL in ms, a whole number (for digits): at most 2^53 µs in ms
-- (285 years), where no time is decided any more (docs/spec.md section
-- 5), so that a bucket whose refill takes longer still gets a TTL Redis
-- takes.
local function ttl_ms(tick, t, t_eff, reset_after)
  local ms = ceil((t_eff - t + reset_after) * tick / 1000) + 1
  if ms < ttl_floor then ms = ttl_floor end
  if ms > 9007199254740 then ms = 9007199254740 end
  return ms
end
-- Notes that the call put a new value (states[key]) of a repeated key
-- (r, its entry), with a TTL of grant ms (nil: the key's TTL kept).
local function defer(r, grant)
  r.put = true
  if grant then r.grant = grant end
end
-- A repeated key's state as save kept it (see decoded): its fields, then
-- the deadline when it has one.
local function encode(r)
  local d = r.deadline
  if r[3] then
    if d then return pack('<ddddc8', r[1], r[2], r[3], d, TAG) end
    return pack('<dddc8', r[1], r[2], r[3], TAG)
  end
  if d then return pack('<dddc8', r[1], r[2], d, TAG) end
  return pack('<ddc8', r[1], r[2], TAG)
end
-- Every repeated key put, written once with its last value: with PX when
-- a TTL was granted, else in place (SETRANGE, see save) when the value is
-- as long as the one Redis holds, else with KEEPTTL. A key that held
-- nothing was granted a TTL (every first write is).
local function flush()
  if not repeated then return end
  for key, r in pairs(repeated) do
    if r.put then
      local value = states[key]
      if value == decoded then value = encode(r) end
      if r.grant then
        redis.call('SET', key, value, 'PX', digits(r.grant))
      elseif #value == #r.held then
        redis.call('SETRANGE', key, '0', value)
      else
        redis.call('SET', key, value, 'KEEPTTL')
      end
    end
  end
end
-- The TTL a write that is not covered by its key's deadline sets (ms
-- plus a margin of max(ms, 1 s), see save), and its new deadline: 5 ms
-- short of the TTL Redis sets (from its own clock, read at the call's
-- start or later), so the deadline never outlives the key. Called about
-- once per margin per key, not per write.
local function renewal(ms)
  local grant = ms + max(ms, 1000)
  return grant, server_ms + grant - 5
end
-- save for a repeated key (r, its entry): the fields kept as numbers (see
-- decoded), the TTL granted as save grants it, the deadline in r.deadline
-- (false: none) rather than in a packed value.
local function keep(key, r, ms, a, b, c)
  r[1], r[2], r[3] = a, b, c
  states[key] = decoded
  r.put = true
  if not server_us then
    r.deadline = false
    r.grant = ms
    granted(ms)
    return
  end
  local deadline = r.deadline
  if deadline == nil then
    -- The call's first put: the deadline of the value Redis holds.
    deadline = false
    local held, fields = r.held, 16
    if c then fields = 24 end
    if held and #held == fields + 16 then deadline = unpack('<d', held, fields + 1) end
  end
  if not deadline or deadline < server_ms + ms then
    r.grant, deadline = renewal(ms)
    granted(r.grant)
  end
  r.deadline = deadline
end
-- A string state of two or three fields, with a TTL of at least ms: one
-- call for the state and its TTL, now, or at the call's end for a key it
-- decides again (defer). Written out rather than shared with the packed
-- log through a helper: each Lua call costs Redis more than the test it
-- makes (docs/benchmarks.md, "Server time per decision").
--
-- With Redis TIME the state carries, after its own fields, the server
-- time (ms) its key's TTL runs out at, a little before it does (then
-- TAG, as every state). A write
-- whose TTL that deadline covers keeps it (overwriting the old state, of
-- the same length, in place); one it does not cover sets ms plus a
-- margin of max(ms, 1 s), so that a key written steadily sets its TTL
-- about once per margin. The key then lives up to that margin past its
-- reset, which is always safe (docs/spec.md rule 2.5). A state without a
-- deadline (one written with a caller clock) sets its TTL.
local function save(key, ms, a, b, c)
  local r = repeated and repeated[key]
  if r then return keep(key, r, ms, a, b, c) end
  if not server_us then
    local value
    if c then value = pack('<dddc8', a, b, c, TAG) else value = pack('<ddc8', a, b, TAG) end
    states[key] = value
    redis.call('SET', key, value, 'PX', digits(ms))
    granted(ms)
    return
  end
  local fields = 16
  if c then fields = 24 end
  local old, deadline = states[key], nil
  if old and #old == fields + 16 then
    deadline = unpack('<d', old, fields + 1)
    if deadline < server_ms + ms then deadline = nil end
  end
  local grant
  if not deadline then grant, deadline = renewal(ms) end
  local value
  if c then
    value = pack('<ddddc8', a, b, c, deadline, TAG)
  else
    value = pack('<dddc8', a, b, deadline, TAG)
  end
  states[key] = value
  if grant then
    redis.call('SET', key, value, 'PX', digits(grant))
    granted(grant)
  else
    -- In place (SETRANGE key 0: no expiry to set or clear, no new object,
    -- and an integer reply, where SET … KEEPTTL makes a new object and
    -- answers a status Lua gets as a table, docs/benchmarks.md): old is as
    -- long.
    redis.call('SETRANGE', key, '0', value)
  end
end
local function expire(key, ms)
  redis.call('PEXPIRE', key, digits(ms))
  granted(ms)
end
