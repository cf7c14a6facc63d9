-- ARGV: 1 batch, 2 lease token, 3 ttl ms, 4 random in [0,1), 5 #exclude, exclude...,
--       #upstreams, upstreams..., class ('interactive' | 'standard' | 'batch'),
--       replica id ('' = none), fresh ('1' first try, '0' a waiter's retry)
-- Returns {'ok', key, expires_at, key_in_flight, key_capacity, online_replicas}
--       | {'full', capacity, in_flight, ms_until_soonest_expiry}
--       | {'batch_share', limit, batch_in_flight, ms_until_soonest_batch_expiry}
--       | {'elsewhere', class rank}: another replica's waiters go first
--       | {'unavailable', earliest_cooldown_end or -1, now} | {'none'} | {'unseeded'}
--       | {'recovering', window_end, now}
if redis.call('EXISTS', K_CAP) == 0 then return {'unseeded'} end
local now = now_ms()
reap(now)
uncool(now)
local token, ttl, rnd = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local excl, ups, nups = {}, {}, 0
local i = 5
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do excl[ARGV[i]] = true; i = i + 1 end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do ups[ARGV[i]] = true; nups = nups + 1; i = i + 1 end
local class, replica, fresh = ARGV[i], ARGV[i + 1], ARGV[i + 2] == '1'
-- A live lease with this token (an idempotent retry; reaped above if expired) is answered
-- again instead of taking a second slot, its TTL counted from now: the retry may come seconds
-- later (a store failover), and its caller starts its renewal clock on this answer.
local held = redis.call('HGET', K_LEASE, token)
if held then
  local exp = tonumber(redis.call('ZSCORE', K_LEASES, token) or 0)
  if exp > now then
    if now + ttl > exp then
      exp = now + ttl
      redis.call('ZADD', K_LEASES, exp, token)
    end
    return {'ok', held, exp, num(redis.call('HGET', K_INF, held)), num(redis.call('HGET', K_CAP, held)), online_replicas()}
  end
  drop_lease(token) -- expired but not reaped yet (the reaping batch ran out)
end
local rec = recovering(now)
if rec > 0 then return {'recovering', rec, now} end
-- One line across replicas, by class: another replica's waiters of a better class (or, for a
-- new arrival, of the same class) go first; this replica's own line orders its waiters.
if replica ~= '' and redis.call('ZCARD', K_WAITING) > 0 then
  local mine = ({interactive = 0, standard = 1, batch = 2})[class] or 1
  local best = nil
  for _, m in ipairs(redis.call('ZRANGE', K_WAITING, now, '+inf', 'BYSCORE')) do
    local r, who = string.match(m, '^(%d):(.+)$')
    r = tonumber(r)
    if who and who ~= replica and (r < mine or (fresh and r == mine)) then
      if best == nil or r < best then best = r end
    end
  end
  if best ~= nil then return {'elsewhere', best} end
end
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
      if s >= 1 or (best_score ~= nil and s > best_score) then done = true; break end
      if eligible(k) and has_room(k) then
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
  for _, k in ipairs(redis.call('HKEYS', K_CAP)) do
    if eligible(k) then
      any = true
      if redis.call('ZSCORE', K_LOAD, k) then
        any_avail = true
        cap_sum = cap_sum + num(redis.call('HGET', K_CAP, k))
        inf_sum = inf_sum + num(redis.call('HGET', K_INF, k))
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
  if any_avail then
    local soon = redis.call('ZRANGE', K_LEASES, 0, 0, 'WITHSCORES')
    local retry = 0
    if #soon > 0 then retry = tonumber(soon[2]) - now end
    return {'full', cap_sum, inf_sum, retry}
  end
  return {'unavailable', next_until, now}
end

local inf = redis.call('HINCRBY', K_INF, pick, 1)
local cap = num(redis.call('HGET', K_CAP, pick))
redis.call('ZADD', K_LOAD, inf / cap, pick)
local exp = now + ttl
redis.call('ZADD', K_LEASES, exp, token)
redis.call('HSET', K_LEASE, token, pick)
if class == 'batch' then redis.call('SADD', K_BATCH, token) end
return {'ok', pick, exp, inf, cap, online_replicas()}
