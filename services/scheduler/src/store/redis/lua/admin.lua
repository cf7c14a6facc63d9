-- ARGV: 1 batch, 2 op ('capacity' | 'disable' | 'enable'), 3 key, 4 capacity.
-- Returns {'ok', key, capacity (ceiling), in_flight, state, cooldown_until, failures,
-- effective capacity, quota used, quota limit, quota resets at} | {'unknown'}.
local now = now_ms()
local k, op = ARGV[3], ARGV[2]
if redis.call('HEXISTS', K_CAP, k) == 0 then return {'unknown'} end
if op == 'capacity' then
  -- A new ceiling; learning starts again from it.
  redis.call('HSET', K_CAP, k, ARGV[4])
  redis.call('HSET', K_CEIL, k, ARGV[4])
  redis.call('HSET', K_ADAPTED, k, now)
elseif op == 'disable' then
  redis.call('SADD', K_DIS, k)
elseif op == 'enable' then
  redis.call('SREM', K_DIS, k)
  redis.call('ZREM', K_COOL, k)
  redis.call('HDEL', K_COOLWHY, k)
  redis.call('HDEL', K_FAILS, k)
else
  return redis.error_reply('unknown admin op')
end
refresh(k)
serve(now)
local st, untl = key_state(k, now)
local used, limit, resets = quota_state(k, now)
return {'ok', k, ceiling(k), num(redis.call('HGET', K_INF, k)), st, untl,
  num(redis.call('HGET', K_FAILS, k)), num(redis.call('HGET', K_CAP, k)), used, limit, resets}
