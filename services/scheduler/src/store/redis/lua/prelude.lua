-- Shared prelude of every voxpool scheduler script. All keys of one pool share the hash
-- tag {pool}, so each script touches one Redis Cluster slot. KEYS (fixed order):
--  1 cap      HASH key -> live capacity          2 cfgcap  HASH key -> capacity at last seed
--  3 inflight HASH key -> live lease count       4 load    ZSET key -> in_flight/capacity,
--                                                           only keys that may take leases
--  5 leases   ZSET lease token -> expiry ms      6 lease   HASH lease token -> key
--  7 cool     ZSET key -> cooldown end ms        8 coolwhy HASH key -> cooldown reason
--  9 disabled SET  keys disabled by an admin    10 fails   HASH key -> consecutive failures
-- 11 clock    STRING test-only clock offset ms (absent in production)
-- 12 recover  STRING end of the recovery window ms (see seed.lua)
-- 13 batch    SET  tokens of the live BATCH leases (a subset of leases)
-- 14 share    STRING the pool's batch_max_share (set by seed.lua; absent = 1)
-- 15 line     ZSET the pool's line: '<seq, 16 digits>:<token>' scored class rank * 2^40 +
--              round, so it sorts by class, then tenant round, then arrival (line_push)
-- 16 tickets  HASH token -> the waiting Acquire, JSON (m member, c class rank, tn tenant,
--              rd round, s since ms, ttl lease ttl ms, ct claim ttl ms, x excluded keys,
--              u upstreams, rnd tie-break)
-- 17 tickexp  ZSET token -> until when the ticket lives without a renewal (ms)
-- 18 rounds   HASH 's<rank>' -> round the class serves; 't<rank>:<tenant>' -> '<last round>
--              <tickets in line>'; 'seq' -> arrival counter
-- 19 handed   ZSET token -> until when a slot handed to that ticket waits for its claim (ms)
-- 20 arrivals ZSET token -> class rank * 2^42 + since ms (waiters and oldest wait per class)
-- 21 ceil     HASH key -> capacity ceiling (configured or admin-set); `cap` is the effective
--              capacity grants use, at most this (report.lua adapts it)
-- 22 adapted  HASH key -> when its effective capacity last changed by adaptation (ms)
-- 23 adaptive STRING '1' | '0': whether the pool adapts (set by seed.lua; absent = '1')
-- 24 lowered  HASH key -> when a concurrency refusal last lowered it (ms)
-- 25 quota    HASH key -> '<characters>:<day|month>', its character budget (seed.lua)
-- 26 qused    HASH key -> characters used in the period starting at qstart
-- 27 qstart   HASH key -> start of the period qused counts (ms)
-- 28 probe    HASH key -> wait before its next capacity probe (ms; absent = the base)
-- 29 reported ZSET lease token -> until when it stays marked as reported on (ms): an outcome
--              changes a key once per lease (store/mod.rs REPORTED_MEMORY_MS)
-- 30 granted  HASH lease token -> when it was granted (ms): every answer for one lease (an
--              idempotent retry, a claim) carries the same grant time, so its signed id too
-- 31 reserved HASH key -> characters reserved by its live leases (not counted in qused yet)
-- 32 lres     HASH lease token -> characters it reserved (leases on a key with a quota)
-- ARGV[1] is always the reaping batch size. Time is Redis TIME, read here (one clock).
local K_CAP, K_CFGCAP, K_INF, K_LOAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_LEASES, K_LEASE, K_COOL, K_COOLWHY = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_DIS, K_FAILS, K_CLOCK, K_REC = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local K_BATCH, K_SHARE, K_LINE, K_TICKETS = KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local K_TICKEXP, K_ROUNDS, K_HANDED, K_ARRIVALS = KEYS[17], KEYS[18], KEYS[19], KEYS[20]
local K_CEIL, K_ADAPTED, K_ADAPTIVE, K_LOWERED = KEYS[21], KEYS[22], KEYS[23], KEYS[24]
local K_QUOTA, K_QUSED, K_QSTART, K_PROBE = KEYS[25], KEYS[26], KEYS[27], KEYS[28]
local K_REPORTED, K_GRANTED, K_RESERVED, K_LRES = KEYS[29], KEYS[30], KEYS[31], KEYS[32]
-- How long a report mark outlives its lease, and the oldest grant a report on a lease the
-- store no longer holds may name (ms; store/mod.rs REPORTED_MEMORY_MS).
local REPORTED_MS = 60000
local CLASSES = {[0] = 'interactive', [1] = 'standard', [2] = 'batch'}
local RANKS = {interactive = 0, standard = 1, batch = 2}
-- Tickets from the line's head a hand-over looks at for one a free key can take (memory.rs
-- SERVE_SCAN).
local SERVE_SCAN = 64
local BATCH = tonumber(ARGV[1])

local function num(v)
  return tonumber(v or 0) or 0
end

-- The key's capacity ceiling (`cap` before the first seed that wrote one).
local function ceiling(k)
  local c = redis.call('HGET', K_CEIL, k)
  if c then return tonumber(c) end
  return num(redis.call('HGET', K_CAP, k))
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    + num(redis.call('GET', K_CLOCK))
end

-- The quota of k: characters per period and the period ('day' | 'month'), or nil.
local function quota_of(k)
  local q = redis.call('HGET', K_QUOTA, k)
  if not q then return nil end
  local limit, per = string.match(q, '^(%d+):(%a+)$')
  return tonumber(limit), per
end

-- Characters k used in the period containing now (0 once a new period began, or no quota),
-- its limit (0 = none) and the period's end.
local function quota_state(k, now)
  local limit, per = quota_of(k)
  if not limit then return 0, 0, 0 end
  local start, untl = quota_window(per, now)
  local used = 0
  if num(redis.call('HGET', K_QSTART, k)) == start then used = num(redis.call('HGET', K_QUSED, k)) end
  return used, limit, untl
end

-- Whether chars more characters fit in k's quota next to what is used and reserved
-- (memory.rs `quota_room`).
local function quota_room(k, chars, now)
  if chars <= 0 then return true end
  local used, limit = quota_state(k, now)
  if limit <= 0 then return true end
  return used + num(redis.call('HGET', K_RESERVED, k)) + chars <= limit
end

-- Whether chars exceed what k's period has left even with nothing reserved.
local function quota_spent_for(k, chars, now)
  if chars <= 0 then return false end
  local used, limit = quota_state(k, now)
  return limit > 0 and used + chars > limit
end

-- Key k is in the load set exactly when it may take leases, scored in_flight/capacity plus 2
-- when it is within a tenth of its quota: such keys rank after every other key, full or not
-- (a score s has room when s % 2 < 1).
local function refresh(k)
  local cap = num(redis.call('HGET', K_CAP, k))
  if cap <= 0 or redis.call('SISMEMBER', K_DIS, k) == 1 or redis.call('ZSCORE', K_COOL, k) then
    redis.call('ZREM', K_LOAD, k)
  else
    local tier = 0
    if redis.call('HEXISTS', K_QUOTA, k) == 1 then
      local used, limit = quota_state(k, now_ms())
      if used * 10 >= limit * 9 then tier = 2 end
    end
    redis.call('ZADD', K_LOAD, tier + num(redis.call('HGET', K_INF, k)) / cap, k)
  end
end

-- Whether any key of the load set has room (either tier).
local function any_room()
  if #redis.call('ZRANGE', K_LOAD, '-inf', '(1', 'BYSCORE', 'LIMIT', 0, 1) > 0 then return true end
  return #redis.call('ZRANGE', K_LOAD, 2, '(3', 'BYSCORE', 'LIMIT', 0, 1) > 0
end

-- Frees one slot of k; never below zero.
local function dec(k)
  if redis.call('HEXISTS', K_CAP, k) == 0 then return end
  if num(redis.call('HGET', K_INF, k)) > 0 then
    redis.call('HINCRBY', K_INF, k, -1)
  end
  refresh(k)
end

-- When token's lease was granted (ms; `now` for one granted before grant times were kept).
local function granted_at(token, now)
  return tonumber(redis.call('HGET', K_GRANTED, token) or now)
end

-- Whether token names a lease held here granted at `granted` (any for a negative one): an
-- idempotency key used again after its lease ended gives its token to another lease, which the
-- earlier lease's id must not reach (memory.rs `holds`).
local function holds(token, granted)
  if not redis.call('HGET', K_LEASE, token) then return false end
  return granted < 0 or tonumber(redis.call('HGET', K_GRANTED, token) or '-1') == granted
end

-- The reported mark of the lease token granted at `granted` (memory.rs `mark`).
local function mark_of(token, granted)
  if granted < 0 then return token end
  return token .. ':' .. granted
end

local function drop_lease(token)
  local k = redis.call('HGET', K_LEASE, token)
  local reserved = tonumber(redis.call('HGET', K_LRES, token) or '0')
  if k and reserved > 0 then redis.call('HINCRBY', K_RESERVED, k, -reserved) end
  redis.call('HDEL', K_LRES, token)
  redis.call('ZREM', K_LEASES, token)
  redis.call('HDEL', K_LEASE, token)
  redis.call('HDEL', K_GRANTED, token)
  redis.call('SREM', K_BATCH, token)
  redis.call('ZREM', K_HANDED, token)
  if k then dec(k) end
end

-- Most BATCH leases the pool allows now: the share of the capacity of the keys that may take
-- leases, rounded down, at least 1 while that capacity is above 0 (model.rs batch_limit).
local function batch_limit()
  local cap = 0
  for _, k in ipairs(redis.call('ZRANGE', K_LOAD, 0, -1)) do
    cap = cap + num(redis.call('HGET', K_CAP, k))
  end
  if cap <= 0 then return 0 end
  local share = tonumber(redis.call('GET', K_SHARE) or '1') or 1
  local limit = math.floor(share * cap + 1e-9)
  if limit < 1 then limit = 1 end
  if limit > cap then limit = cap end
  return limit
end

-- Reclaims up to BATCH expired leases (expiry <= now) and up to BATCH slots handed to
-- tickets whose claim never came; returns how many leases it reclaimed.
local function reap(now)
  local expired = redis.call('ZRANGE', K_LEASES, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH)
  for _, token in ipairs(expired) do drop_lease(token) end
  local unclaimed = redis.call('ZRANGE', K_HANDED, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH)
  for _, token in ipairs(unclaimed) do drop_lease(token) end
  redis.call('ZREMRANGEBYSCORE', K_REPORTED, '-inf', now)
  return #expired + #unclaimed
end

-- Returns up to BATCH keys whose cooldown ended to the load set.
local function uncool(now)
  local due = redis.call('ZRANGE', K_COOL, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH)
  for _, k in ipairs(due) do
    redis.call('ZREM', K_COOL, k)
    redis.call('HDEL', K_COOLWHY, k)
    refresh(k)
  end
end

-- State of k at now: 'available' | 'cooling' | 'disabled' | 'over_quota', and its cooldown
-- end (0 = none; for 'over_quota' the end of the quota period).
local function key_state(k, now)
  local untl = num(redis.call('ZSCORE', K_COOL, k))
  if untl <= now then untl = 0 end
  if num(redis.call('HGET', K_CAP, k)) <= 0 or redis.call('SISMEMBER', K_DIS, k) == 1 then
    return 'disabled', untl
  end
  if untl > 0 then
    local why = redis.call('HGET', K_COOLWHY, k)
    if why == 'credential' then return 'disabled', untl end
    if why == 'quota' then return 'over_quota', untl end
    return 'cooling', untl
  end
  return 'available', 0
end

-- End of the recovery window if it is still running at now, else 0.
local function recovering(now)
  local untl = num(redis.call('GET', K_REC))
  if untl > now then return untl end
  return 0
end

-- Replicas connected and in sync with this primary right now: the most a WAIT could count.
-- 0 without asking when the store waits for no replica (COUNT_REPLICAS, set by the script's
-- first line, mod.rs `Scripts`): `INFO replication` costs Redis about 6 µs, a tenth of a grant.
local function online_replicas()
  if not COUNT_REPLICAS then return 0 end
  local n = 0
  for _ in string.gmatch(redis.call('INFO', 'replication'), 'state=online') do n = n + 1 end
  return n
end

-- Takes the ticket of token out of the line (served: it was handed a slot, so its class now
-- serves its round; line.rs `take`). Returns the ticket, or nil when absent.
local function line_take(token, served)
  local raw = redis.call('HGET', K_TICKETS, token)
  if not raw then return nil end
  local t = cjson.decode(raw)
  redis.call('ZREM', K_LINE, t.m)
  redis.call('HDEL', K_TICKETS, token)
  redis.call('ZREM', K_TICKEXP, token)
  redis.call('ZREM', K_ARRIVALS, token)
  if served and num(redis.call('HGET', K_ROUNDS, 's' .. t.c)) < t.rd then
    redis.call('HSET', K_ROUNDS, 's' .. t.c, t.rd)
  end
  local tf = 't' .. t.c .. ':' .. t.tn
  local v = redis.call('HGET', K_ROUNDS, tf)
  if v then
    local last, count = string.match(v, '^(%d+) (%d+)$')
    count = tonumber(count or 1) - 1
    if count <= 0 then
      redis.call('HDEL', K_ROUNDS, tf)
    else
      redis.call('HSET', K_ROUNDS, tf, last .. ' ' .. count)
    end
  end
  return t
end

-- Puts ticket t (fields c, tn and the Acquire's) in line under token, at the end of its
-- tenant's share of its class (line.rs `push`), living ttl ms without a renewal.
local function line_push(token, t, now, ttl)
  line_take(token, false)
  local serving = num(redis.call('HGET', K_ROUNDS, 's' .. t.c))
  local tf = 't' .. t.c .. ':' .. t.tn
  local v = redis.call('HGET', K_ROUNDS, tf)
  local round, count = serving, 1
  if v then
    local last, n = string.match(v, '^(%d+) (%d+)$')
    round = math.max(tonumber(last or serving) + 1, serving)
    count = tonumber(n or 0) + 1
  end
  redis.call('HSET', K_ROUNDS, tf, string.format('%d %d', round, count))
  local seq = redis.call('HINCRBY', K_ROUNDS, 'seq', 1)
  t.m = string.format('%016d:%s', seq, token)
  t.rd = round
  t.s = now
  redis.call('ZADD', K_LINE, t.c * 2 ^ 40 + round, t.m)
  redis.call('HSET', K_TICKETS, token, cjson.encode(t))
  redis.call('ZADD', K_TICKEXP, now + ttl, token)
  redis.call('ZADD', K_ARRIVALS, t.c * 2 ^ 42 + now, token)
end

-- Drops up to BATCH tickets that expired by now (their replica stopped renewing them).
local function line_expire(now)
  for _, token in ipairs(redis.call('ZRANGE', K_TICKEXP, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH)) do
    line_take(token, false)
  end
end

-- Leases one slot to token (ttl ms, tie-break rnd in [0,1), excl set of excluded keys, ups set
-- of wanted upstreams, nups of them, class name, chars to reserve on the key's quota) on the
-- least-utilized eligible key with room (in capacity and in quota).
-- Returns {'ok', key, expires_at, key_in_flight, key_capacity, granted_at} or the refusal:
-- {'full', capacity, in_flight, ms_until_soonest_expiry, keys with a free slot but no quota
--  room for chars (reservations of calls in flight)}
-- | {'batch_share', limit, batch_in_flight, ms_until_soonest_batch_expiry}
-- | {'unavailable', earliest_cooldown_end or -1, now} | {'none'}.
local function try_grant(token, ttl, rnd, excl, ups, nups, class, now, chars)
  chars = chars or 0
  if class == 'batch' then
    local held = redis.call('SCARD', K_BATCH)
    local limit = batch_limit()
    if limit > 0 and held >= limit then
      -- Soonest expiry among BATCH leases: a bounded scan of the soonest leases overall.
      local retry = 0
      local soon = redis.call('ZRANGE', K_LEASES, 0, 63, 'WITHSCORES')
      for j = 1, #soon, 2 do
        if redis.call('SISMEMBER', K_BATCH, soon[j]) == 1 then retry = tonumber(soon[j + 1]) - now; break end
      end
      return {'batch_share', limit, held, retry}
    end
  end
  local function eligible(k)
    if excl[k] then return false end
    if nups > 0 then
      local u = string.match(k, '^([^/]+)/')
      return u ~= nil and ups[u] == true
    end
    return true
  end
  local function has_room(k)
    return num(redis.call('HGET', K_INF, k)) < num(redis.call('HGET', K_CAP, k))
      and quota_room(k, chars, now)
  end
  local pick = nil
  -- Fast path, O(log n): a random key among those tied at the lowest utilization.
  local head = redis.call('ZRANGE', K_LOAD, 0, 0, 'WITHSCORES')
  if #head > 0 and tonumber(head[2]) < 1 then
    local ties = redis.call('ZCOUNT', K_LOAD, head[2], head[2])
    local r = math.min(math.floor(rnd * ties), ties - 1)
    local cand = redis.call('ZRANGE', K_LOAD, r, r)[1]
    if cand and eligible(cand) and has_room(cand) then pick = cand end
  end
  -- Filtered path: walk the load set in utilization order (rank pages, O(log n) each) and
  -- take a random key among the eligible ones tied at the lowest utilization.
  if not pick and #head > 0 then
    local best, nbest, best_score = {}, 0, nil
    local start, done = 0, false
    while not done do
      local page = redis.call('ZRANGE', K_LOAD, start, start + 127, 'WITHSCORES')
      if #page == 0 then break end
      for j = 1, #page, 2 do
        local k, s = page[j], tonumber(page[j + 1])
        if s >= 3 or (best_score ~= nil and s > best_score) then done = true; break end
        if s % 2 < 1 and eligible(k) and has_room(k) then
          best_score = s
          nbest = nbest + 1
          best[nbest] = k
        end
      end
      start = start + 128
    end
    if nbest > 0 then pick = best[math.min(math.floor(rnd * nbest) + 1, nbest)] end
  end
  if not pick then
    -- No grant: say why (this path scans the pool's keys; it only runs when nothing is free).
    local any, any_avail, cap_sum, inf_sum, next_until = false, false, 0, 0, -1
    -- Keys with a free slot but not the quota for chars; all spent for them: only the next
    -- period serves them (memory.rs `try_grant`).
    local short, held, all_spent, next_period = 0, 0, true, -1
    for _, k in ipairs(redis.call('HKEYS', K_CAP)) do
      if eligible(k) then
        any = true
        if redis.call('ZSCORE', K_LOAD, k) then
          any_avail = true
          local kcap, kinf = num(redis.call('HGET', K_CAP, k)), num(redis.call('HGET', K_INF, k))
          cap_sum = cap_sum + kcap
          inf_sum = inf_sum + kinf
          if kinf < kcap and not quota_room(k, chars, now) then
            short = short + 1
            if quota_spent_for(k, chars, now) then
              local _, _, resets = quota_state(k, now)
              if next_period < 0 or resets < next_period then next_period = resets end
            else
              all_spent = false
              held = held + 1
            end
          end
        else
          local c = redis.call('ZSCORE', K_COOL, k)
          if c and redis.call('SISMEMBER', K_DIS, k) == 0 and num(redis.call('HGET', K_CAP, k)) > 0 then
            c = tonumber(c)
            if next_until < 0 or c < next_until then next_until = c end
          end
        end
      end
    end
    if not any then return {'none'} end
    if short > 0 and all_spent then return {'unavailable', next_period, now} end
    if any_avail then
      local soon = redis.call('ZRANGE', K_LEASES, 0, 0, 'WITHSCORES')
      local retry = 0
      if #soon > 0 then retry = tonumber(soon[2]) - now end
      return {'full', cap_sum, inf_sum, retry, held}
    end
    return {'unavailable', next_until, now}
  end
  local inf = redis.call('HINCRBY', K_INF, pick, 1)
  local cap = num(redis.call('HGET', K_CAP, pick))
  refresh(pick)
  local exp = now + ttl
  redis.call('ZADD', K_LEASES, exp, token)
  redis.call('HSET', K_LEASE, token, pick)
  redis.call('HSET', K_GRANTED, token, now)
  if chars > 0 and quota_of(pick) then
    redis.call('HINCRBY', K_RESERVED, pick, chars)
    redis.call('HSET', K_LRES, token, chars)
  end
  if class == 'batch' then redis.call('SADD', K_BATCH, token) end
  return {'ok', pick, exp, inf, cap, now}
end

-- A list as a set.
local function set_of(list)
  local out = {}
  for _, v in ipairs(list or {}) do out[v] = true end
  return out
end

-- Hands free slots to the line's head (outside a recovery window; store/mod.rs "The line"):
-- for each, the first of the line's first SERVE_SCAN tickets a key can take, at most BATCH
-- per call. The lease is written under the ticket's token, waits for its claim until the
-- ticket's claim ttl, and is announced on the pool's channel `<prefix>:{P}:freed` (wake.rs)
-- with the token as the message (and listed in HANDED).
-- Tokens handed a slot by this script, in order: release.lua and report.lua reply them, so
-- the replica that ran the script tells its own waiters without waiting for the message.
local HANDED = {}

local function serve(now)
  line_expire(now)
  if redis.call('ZCARD', K_LINE) == 0 or recovering(now) > 0 then return end
  uncool(now)
  local channel = (string.gsub(K_CAP, ':cap$', ':freed'))
  for _ = 1, BATCH do
    if not any_room() then return end
    local got, claim_ttl = nil, 0
    local head_line = redis.call('ZRANGE', K_LINE, 0, SERVE_SCAN - 1, 'WITHSCORES')
    for j = 1, #head_line, 2 do
      local m = head_line[j]
      local token = string.sub(m, 18)
      -- Every ticket from the first BATCH one on is BATCH: none can go while the share is held.
      if math.floor(tonumber(head_line[j + 1]) / 2 ^ 40) == 2
        and redis.call('SCARD', K_BATCH) >= batch_limit() then
        break
      end
      local raw = redis.call('HGET', K_TICKETS, token)
      if raw then
        local t = cjson.decode(raw)
        local u = t.u or {}
        local r = try_grant(token, t.ttl, t.rnd, set_of(t.x), set_of(u), #u, CLASSES[t.c], now, t.ch or 0)
        if r[1] == 'ok' then got, claim_ttl = token, t.ct; break end
        -- Every ticket after a BATCH one is BATCH too.
        if r[1] == 'batch_share' then break end
      else
        redis.call('ZREM', K_LINE, m)
      end
    end
    if not got then return end
    line_take(got, true)
    redis.call('ZADD', K_HANDED, now + claim_ttl, got)
    redis.call('PUBLISH', channel, got)
    HANDED[#HANDED + 1] = got
  end
end
