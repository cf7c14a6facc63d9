-- ARGV: 1 batch, 2 lease token, 3 ttl ms.
-- Returns {'ok', key, expires_at, key_in_flight, key_capacity} | {'gone'} (never resurrects).
local now = now_ms()
reap(now)
local token = ARGV[2]
local exp = redis.call('ZSCORE', K_LEASES, token)
if not exp then return {'gone'} end
if tonumber(exp) <= now then
  drop_lease(token)
  return {'gone'}
end
local k = redis.call('HGET', K_LEASE, token)
local newexp = now + tonumber(ARGV[3])
redis.call('ZADD', K_LEASES, newexp, token)
return {'ok', k, newexp, num(redis.call('HGET', K_INF, k)), num(redis.call('HGET', K_CAP, k))}
