-- ARGV: 1 batch, 2 lease token, 3 ttl ms, 4 key id the holder says the lease is on ('' = none).
-- Returns {'ok', key, expires_at, key_in_flight, key_capacity}
--       | {'reregistered', ...same, online_replicas}: the store had lost the lease and the recovery window runs,
--         so it is counted on its key again | {'gone'} (never resurrects an expired lease)
--       | {'unseeded'}: the pool itself is gone (the caller re-seeds, opening the window).
if redis.call('EXISTS', K_CAP) == 0 then return {'unseeded'} end
local now = now_ms()
reap(now)
local token, ttl, claimed = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local exp = redis.call('ZSCORE', K_LEASES, token)
local newexp = now + ttl
if not exp then
  -- Re-registration never takes a key past its capacity: the holders the store lost were
  -- within it, and a lease id nobody was granted must not buy a slot the cap does not have.
  if claimed == '' or recovering(now) == 0 or redis.call('HEXISTS', K_CAP, claimed) == 0
    or num(redis.call('HGET', K_INF, claimed)) >= num(redis.call('HGET', K_CAP, claimed)) then
    return {'gone'}
  end
  local inf = redis.call('HINCRBY', K_INF, claimed, 1)
  refresh(claimed)
  redis.call('ZADD', K_LEASES, newexp, token)
  redis.call('HSET', K_LEASE, token, claimed)
  return {'reregistered', claimed, newexp, inf, num(redis.call('HGET', K_CAP, claimed)), online_replicas()}
end
if tonumber(exp) <= now then
  drop_lease(token)
  return {'gone'}
end
local k = redis.call('HGET', K_LEASE, token)
redis.call('ZADD', K_LEASES, newexp, token)
return {'ok', k, newexp, num(redis.call('HGET', K_INF, k)), num(redis.call('HGET', K_CAP, k))}
