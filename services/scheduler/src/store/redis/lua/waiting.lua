-- ARGV: 1 batch, 2 '<class rank>:<replica id>', 3 ttl ms (0 = no waiters of that class any
-- more). Registers (or drops) a replica with waiters of one class of this pool, so
-- slot-freeing scripts wake it (prelude.lua `wake`) and acquire.lua defers other replicas'
-- grants to it; expired registrations are dropped here.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', K_WAITING, '-inf', now)
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('ZADD', K_WAITING, now + ttl, ARGV[2])
else
  redis.call('ZREM', K_WAITING, ARGV[2])
end
return 1
