-- ARGV: 1 batch, 2 lease token, 3 outcome, 4 retry_after ms, 5 release '1'|'0',
--       6 fallback key ('' = none), 7 rate-limit cooldown, 8 failure threshold,
--       9 failure backoff base, 10 failure backoff max, 11 credential cooldown,
--       12 adaptive decrease factor, 13 adaptive hold ms, 14 adaptive increase ms (the base
--       wait between probes; a refused probe doubles the key's, 16 caps it),
--       15 characters the call synthesized (counted against the key's quota on success, at
--       most what the lease reserved at Acquire: a key that spends it cools until its period
--       ends, reason 'quota'),
--       16 adaptive increase max ms, 17 grant time of the lease (store clock ms; -1 = unknown).
-- Returns {'ok', key, state, cooldown_until, released, effective capacity before, after,
-- applied 1|0, tokens of the waiters handed a slot (prelude.lua `serve`)...} | {'unknown'}.
-- An outcome is applied once per lease (K_REPORTED), and to a lease the store no longer holds
-- only when it was granted within REPORTED_MS; otherwise the report only releases.
-- Adaptation (model.rs `HealthPolicy::lowered_capacity`, memory.rs `apply_outcome`): a
-- CONCURRENCY_LIMITED report lowers the effective capacity (`cap`) to floor(cap * factor), not
-- below the leases the vendor accepted (in flight less the refused one) nor below 1, at least
-- one slot, unless the key holds more leases than that (granted before a decrease: a stale
-- signal) or a refusal lowered it within the hold; a success raises it by one toward the
-- ceiling once the increase interval passed since the last change. On an adaptive pool a
-- RATE_LIMITED report lowers it the same way (every overload signal teaches it).
local now = now_ms()
local token = ARGV[2]
-- An expired lease no longer names its key (same as after reaping): reclaim it now.
local exp = redis.call('ZSCORE', K_LEASES, token)
if exp and tonumber(exp) <= now then drop_lease(token) end
local granted = tonumber(ARGV[17])
local live = holds(token, granted)
local k = false
if live then k = redis.call('HGET', K_LEASE, token) end
if not k then
  if ARGV[6] ~= '' then k = ARGV[6] else return {'unknown'} end
end
if redis.call('HEXISTS', K_CAP, k) == 0 then return {'unknown'} end
local mark = token
if granted >= 0 then
  mark = mark_of(token, granted)
elseif live then
  mark = mark_of(token, granted_at(token, now))
end
local applied = (live or (granted >= 0 and now - granted <= REPORTED_MS))
  and not redis.call('ZSCORE', K_REPORTED, mark)
if applied then
  local lexp = now
  if live then lexp = tonumber(redis.call('ZSCORE', K_LEASES, token) or now) end
  if lexp < now then lexp = now end
  redis.call('ZADD', K_REPORTED, lexp + REPORTED_MS, mark)
end

-- A new cooldown never shortens an existing one.
local function cool(untl, why)
  local cur = redis.call('ZSCORE', K_COOL, k)
  if not cur or tonumber(cur) < untl then
    redis.call('ZADD', K_COOL, untl, k)
    redis.call('HSET', K_COOLWHY, k, why)
  end
end

local outcome = ARGV[3]
if not applied then outcome = 'none' end
local eff = num(redis.call('HGET', K_CAP, k))
local adaptive = redis.call('GET', K_ADAPTIVE) ~= '0'
-- Adaptive pools: a rate-limit refusal is an overload signal and lowers the effective capacity
-- as a concurrency refusal does; its cooldown is applied after the adaptation below.
local rate_limited = outcome == 'rate_limited'
if rate_limited and adaptive then outcome = 'concurrency_limited' end
local since = now - num(redis.call('HGET', K_ADAPTED, k))
if outcome == 'success' then
  redis.call('HDEL', K_FAILS, k)
  -- The lease's reservation is settled: at most what it reserved counts.
  local reserved = 0
  if live then reserved = tonumber(redis.call('HGET', K_LRES, token) or '0') end
  if reserved > 0 then
    redis.call('HINCRBY', K_RESERVED, k, -reserved)
    redis.call('HDEL', K_LRES, token)
  end
  local chars = math.min(tonumber(ARGV[15]), reserved)
  local limit, per = quota_of(k)
  if limit and chars > 0 then
    local start, untl = quota_window(per, now)
    if num(redis.call('HGET', K_QSTART, k)) ~= start then
      redis.call('HSET', K_QSTART, k, start)
      redis.call('HSET', K_QUSED, k, 0)
    end
    if redis.call('HINCRBY', K_QUSED, k, chars) >= limit then cool(untl, 'quota') end
  end
  local wait = num(redis.call('HGET', K_PROBE, k))
  if wait <= 0 then wait = tonumber(ARGV[14]) end
  if adaptive and eff < ceiling(k) and since >= wait then
    -- The last change an increase that held: probes go back to the base pace.
    if num(redis.call('HGET', K_ADAPTED, k)) > num(redis.call('HGET', K_LOWERED, k)) then
      redis.call('HSET', K_PROBE, k, ARGV[14])
    end
    redis.call('HSET', K_CAP, k, eff + 1)
    redis.call('HSET', K_ADAPTED, k, now)
  end
elseif outcome == 'concurrency_limited' then
  local since_lowered = now - num(redis.call('HGET', K_LOWERED, k))
  local inf = num(redis.call('HGET', K_INF, k))
  -- More leases than the effective capacity: granted before it was lowered, a stale signal.
  if adaptive and eff > 1 and inf <= eff and since_lowered >= tonumber(ARGV[13]) then
    local lowered = math.floor(eff * tonumber(ARGV[12]) + 1e-9)
    local accepted = inf - 1
    if accepted > lowered then lowered = accepted end
    if lowered > eff - 1 then lowered = eff - 1 end
    if lowered < 1 then lowered = 1 end
    -- A refused probe (the last change was an increase): wait twice as long for the next.
    if num(redis.call('HGET', K_ADAPTED, k)) > num(redis.call('HGET', K_LOWERED, k)) then
      local cur = math.max(num(redis.call('HGET', K_PROBE, k)), tonumber(ARGV[14]))
      redis.call('HSET', K_PROBE, k, math.min(cur * 2, tonumber(ARGV[16])))
    end
    redis.call('HSET', K_CAP, k, lowered)
    redis.call('HSET', K_ADAPTED, k, now)
    redis.call('HSET', K_LOWERED, k, now)
  end
elseif outcome == 'rate_limited' then
  local wait = tonumber(ARGV[4])
  if wait <= 0 then wait = tonumber(ARGV[7]) end
  cool(now + wait, 'rate_limited')
elseif outcome == 'upstream_error' or outcome == 'timeout' then
  local f = redis.call('HINCRBY', K_FAILS, k, 1)
  local threshold = tonumber(ARGV[8])
  if f >= threshold then
    local wait = math.min(tonumber(ARGV[9]) * 2 ^ math.min(f - threshold, 32), tonumber(ARGV[10]))
    cool(now + wait, 'failures')
  end
elseif outcome == 'key_invalid' or outcome == 'quota_exhausted' then
  cool(now + tonumber(ARGV[11]), 'credential')
end
-- A rate limit on an adaptive pool cools only for the vendor's Retry-After, or the default
-- when the key ran no other lease (a lone request refused: no concurrency of ours explains it).
if rate_limited and adaptive then
  local wait = tonumber(ARGV[4])
  if wait <= 0 and num(redis.call('HGET', K_INF, k)) <= 1 then wait = tonumber(ARGV[7]) end
  if wait > 0 then cool(now + wait, 'rate_limited') end
end

local released = 0
if ARGV[5] == '1' and live then
  local exp = redis.call('ZSCORE', K_LEASES, token)
  if exp then
    if tonumber(exp) > now then released = 1 end
    drop_lease(token)
  end
end
refresh(k)
reap(now)
serve(now)
local st, untl = key_state(k, now)
local out = {'ok', k, st, untl, released, eff, num(redis.call('HGET', K_CAP, k)), applied and 1 or 0}
for _, t in ipairs(HANDED) do out[#out + 1] = t end
return out
