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
-- 15 waiting  ZSET replica id -> expiry ms: replicas with waiters of this pool (waiting.lua)
-- ARGV[1] is always the reaping batch size. Time is Redis TIME, read here (one clock).
local K_CAP, K_CFGCAP, K_INF, K_LOAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_LEASES, K_LEASE, K_COOL, K_COOLWHY = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_DIS, K_FAILS, K_CLOCK, K_REC = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local K_BATCH, K_SHARE, K_WAITING = KEYS[13], KEYS[14], KEYS[15]
local BATCH = tonumber(ARGV[1])

local function num(v)
  return tonumber(v or 0) or 0
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    + num(redis.call('GET', K_CLOCK))
end

-- Key k is in the load set, scored in_flight/capacity, exactly when it may take leases.
local function refresh(k)
  local cap = num(redis.call('HGET', K_CAP, k))
  if cap <= 0 or redis.call('SISMEMBER', K_DIS, k) == 1 or redis.call('ZSCORE', K_COOL, k) then
    redis.call('ZREM', K_LOAD, k)
  else
    redis.call('ZADD', K_LOAD, num(redis.call('HGET', K_INF, k)) / cap, k)
  end
end

-- Frees one slot of k; never below zero.
local function dec(k)
  if redis.call('HEXISTS', K_CAP, k) == 0 then return end
  if num(redis.call('HGET', K_INF, k)) > 0 then
    redis.call('HINCRBY', K_INF, k, -1)
  end
  refresh(k)
end

local function drop_lease(token)
  local k = redis.call('HGET', K_LEASE, token)
  redis.call('ZREM', K_LEASES, token)
  redis.call('HDEL', K_LEASE, token)
  redis.call('SREM', K_BATCH, token)
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

-- Reclaims up to BATCH expired leases (expiry <= now); returns how many.
local function reap(now)
  local expired = redis.call('ZRANGE', K_LEASES, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH)
  for _, token in ipairs(expired) do drop_lease(token) end
  return #expired
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

-- State of k at now: 'available' | 'cooling' | 'disabled', and its cooldown end (0 = none).
local function key_state(k, now)
  local untl = num(redis.call('ZSCORE', K_COOL, k))
  if untl <= now then untl = 0 end
  if num(redis.call('HGET', K_CAP, k)) <= 0 or redis.call('SISMEMBER', K_DIS, k) == 1 then
    return 'disabled', untl
  end
  if untl > 0 then
    if redis.call('HGET', K_COOLWHY, k) == 'credential' then return 'disabled', untl end
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
local function online_replicas()
  local n = 0
  for _ in string.gmatch(redis.call('INFO', 'replication'), 'state=online') do n = n + 1 end
  return n
end

-- Tells the replicas with waiters of this pool that a slot may be free (wake.rs): PUBLISH on
-- the pool's channel, only while some replica's registration in K_WAITING is live.
local function wake(now)
  if redis.call('ZCOUNT', K_WAITING, now, '+inf') > 0 then
    redis.call('PUBLISH', (string.gsub(K_CAP, ':cap$', ':freed')), '1')
  end
end
