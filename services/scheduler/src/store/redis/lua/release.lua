-- ARGV: 1 batch, 2 lease token. Returns 1 if this call freed a live lease, else 0
-- (already released, or expired: an expired lease's slot is reclaimed here if not yet).
local now = now_ms()
local token = ARGV[2]
local exp = redis.call('ZSCORE', K_LEASES, token)
local live = exp and tonumber(exp) > now
if exp then drop_lease(token) end
local reaped = reap(now)
if live or reaped > 0 then wake(now) end
if live then return 1 end
return 0
