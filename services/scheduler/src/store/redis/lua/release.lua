-- ARGV: 1 batch, 2 lease token, 3 its grant time (ms; -1 = any lease under the token).
-- Returns {1 if this call freed a live lease, else 0 (already
-- released, or expired: an expired lease's slot is reclaimed here if not yet), then the
-- tokens of the waiters handed what it freed (prelude.lua `serve`)}.
local now = now_ms()
local token = ARGV[2]
local exp = redis.call('ZSCORE', K_LEASES, token)
if exp and not holds(token, tonumber(ARGV[3])) then exp = false end
local live = exp and tonumber(exp) > now
if exp then drop_lease(token) end
reap(now)
serve(now)
local out = {0}
if live then out[1] = 1 end
for _, t in ipairs(HANDED) do out[#out + 1] = t end
return out
