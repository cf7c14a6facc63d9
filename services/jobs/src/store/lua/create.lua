-- Creates a job unless it exists. ARGV: 1 group, 2 n (job field pairs), then n field/value
-- pairs, then id/spec pairs of the items. Returns {create time (ms)}, or {0} when the job
-- existed already (an array: every script answers one).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0}
end
local now = now_ms()
local n = tonumber(ARGV[2])
local i = 3
for _ = 1, n do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call('XGROUP', 'CREATE', KEYS[6], ARGV[1], '0', 'MKSTREAM')
local items = 0
while i <= #ARGV do
  local id = ARGV[i]
  redis.call('HSET', KEYS[2], id, ARGV[i + 1])
  redis.call('HSET', KEYS[3], id, 'Q')
  redis.call('RPUSH', KEYS[5], id)
  redis.call('XADD', KEYS[6], '*', 'id', id)
  items = items + 1
  i = i + 2
end
redis.call('HSET', KEYS[1], 'create_ms', now, 'state', 'QUEUED', 'total', items,
  'queued', items, 'running', 0, 'succeeded', 0, 'failed', 0, 'cancelled', 0,
  'characters_succeeded', 0, 'cached_items', 0)
return {now}
