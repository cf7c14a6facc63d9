-- Takes the job's next new item for consumer ARGV[2] of group ARGV[1]. Returns
-- {'item', entry, id, spec, deliveries}, {'empty'} (nothing new), {'closed', running}
-- (cancelled or ended: nothing starts any more), {'skip'} (an entry of an item already ended,
-- acknowledged now) or {'gone'}.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'gone'} end
if state ~= 'QUEUED' and state ~= 'RUNNING' then
  return {'closed', redis.call('HGET', KEYS[1], 'running')}
end
local read = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1,
  'STREAMS', KEYS[6], '>')
if not read then return {'empty'} end
local entry = read[1][2][1]
local eid, id = entry[1], entry[2][2]
local s = redis.call('HGET', KEYS[3], id)
if s == 'Q' then
  redis.call('HSET', KEYS[3], id, 'R')
  redis.call('HINCRBY', KEYS[1], 'queued', -1)
  redis.call('HINCRBY', KEYS[1], 'running', 1)
  if state == 'QUEUED' then
    redis.call('HSET', KEYS[1], 'state', 'RUNNING', 'start_ms', now_ms())
  end
elseif s ~= 'R' then
  redis.call('XACK', KEYS[6], ARGV[1], eid)
  return {'skip'}
end
local d = redis.call('HINCRBY', KEYS[7], 'd:' .. id, 1)
return {'item', eid, id, redis.call('HGET', KEYS[2], id), d}
