-- Sends running item ARGV[1] back to wait for a spent budget: it is queued again (it stays in
-- the stream's pending list, where a reclaim finds it once the pause is over), and the
-- Synthesize call the budget refused spends neither an attempt nor a delivery. ARGV[2]: the
-- budget wait's JSON, kept on the job's record until an item succeeds or the job ends.
-- Returns {'ok'}, {'dup'} (the item is not running: another worker ended it) or {'gone'}.
local id = ARGV[1]
local h = redis.call('HMGET', KEYS[1], 'state', 'end_ms')
if not h[1] or h[2] then return {'gone'} end
if redis.call('HGET', KEYS[3], id) ~= 'R' then return {'dup'} end
redis.call('HSET', KEYS[3], id, 'Q')
redis.call('HINCRBY', KEYS[1], 'running', -1)
redis.call('HINCRBY', KEYS[1], 'queued', 1)
if tonumber(redis.call('HGET', KEYS[7], 'a:' .. id) or '0') > 0 then
  redis.call('HINCRBY', KEYS[7], 'a:' .. id, -1)
end
if tonumber(redis.call('HGET', KEYS[7], 'd:' .. id) or '0') > 0 then
  redis.call('HINCRBY', KEYS[7], 'd:' .. id, -1)
end
redis.call('HSET', KEYS[1], 'budget_wait', ARGV[2])
return {'ok'}
