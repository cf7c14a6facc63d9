-- Cancels the job: every queued item ends CANCELLED at once; running ones end at their next
-- boundary (their workers see the state). ARGV[1]: retention ms.
-- Returns {'cancelled', terminal state or ''}, {'finished', state} or {'gone'}.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'gone'} end
if state == 'SUCCEEDED' or state == 'FAILED' then return {'finished', state} end
if state == 'CANCELLED' then return {'cancelled', ''} end
local all = redis.call('HGETALL', KEYS[3])
local n = 0
for i = 1, #all, 2 do
  if all[i + 1] == 'Q' then
    redis.call('HSET', KEYS[3], all[i], 'C')
    n = n + 1
  end
end
-- Only when some were queued: Lua prints -0 as "-0", which HINCRBY refuses as no integer.
if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'queued', -n)
  redis.call('HINCRBY', KEYS[1], 'cancelled', n)
end
local now = now_ms()
redis.call('HSET', KEYS[1], 'state', 'CANCELLED', 'cancel_ms', now)
return {'cancelled', settle(now, tonumber(ARGV[1]))}
