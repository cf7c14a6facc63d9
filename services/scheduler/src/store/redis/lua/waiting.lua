-- ARGV: 1 batch, 2 replica id, 3 ttl ms (0 = this replica has no waiters any more).
-- Registers (or drops) a replica with waiters of this pool, so slot-freeing scripts wake it
-- (prelude.lua `wake`); expired registrations are dropped here.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', K_WAITING, '-inf', now)
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('ZADD', K_WAITING, now + ttl, ARGV[2])
else
  redis.call('ZREM', K_WAITING, ARGV[2])
end
return 1
