-- ARGV: 1 batch, 2 lease token, 3 ttl ms, 4 key id the holder says the lease is on ('' = none),
--       5 longest ttl of a re-registered lease (ms; the default lease TTL), 6 the lease's grant
--       time (ms; -1 = any lease under the token; a re-registered lease keeps it).
-- Returns {'ok', key, expires_at, key_in_flight, key_capacity, granted_at}
--       | {'reregistered', ...same, online_replicas}: the store had lost the lease and the recovery window runs,
--         so it is counted on its key again | {'gone'} (never resurrects an expired lease)
--       | {'unseeded'}: the pool itself is gone (the caller re-seeds, opening the window).
if redis.call('EXISTS', K_CAP) == 0 then return {'unseeded'} end
local now = now_ms()
reap(now)
local token, ttl, claimed = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local exp = redis.call('ZSCORE', K_LEASES, token)
local granted = tonumber(ARGV[6])
-- Another lease under the same token: this id's lease ended.
if exp and not holds(token, granted) then return {'gone'} end
local newexp = now + ttl
if not exp then
  -- Re-registration never takes a key past its capacity: the holders the store lost were
  -- within it, and a lease id nobody was granted must not buy a slot the cap does not have.
  if claimed == '' or recovering(now) == 0 or redis.call('HEXISTS', K_CAP, claimed) == 0
    or num(redis.call('HGET', K_INF, claimed)) >= num(redis.call('HGET', K_CAP, claimed)) then
    return {'gone'}
  end
  newexp = now + math.min(ttl, tonumber(ARGV[5]))
  local inf = redis.call('HINCRBY', K_INF, claimed, 1)
  refresh(claimed)
  redis.call('ZADD', K_LEASES, newexp, token)
  redis.call('HSET', K_LEASE, token, claimed)
  local at = now
  if granted >= 0 then at = granted end
  redis.call('HSET', K_GRANTED, token, at)
  return {'reregistered', claimed, newexp, inf, num(redis.call('HGET', K_CAP, claimed)), at, online_replicas()}
end
if tonumber(exp) <= now then
  drop_lease(token)
  return {'gone'}
end
local k = redis.call('HGET', K_LEASE, token)
redis.call('ZADD', K_LEASES, newexp, token)
-- A reported lease stays marked until REPORTED_MS after its end.
redis.call('ZADD', K_REPORTED, 'XX', 'GT', newexp + REPORTED_MS, mark_of(token, granted_at(token, now)))
return {'ok', k, newexp, num(redis.call('HGET', K_INF, k)), num(redis.call('HGET', K_CAP, k)), granted_at(token, now)}
