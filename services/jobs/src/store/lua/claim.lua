-- Claims for consumer ARGV[2] (group ARGV[1]) one item whose worker went silent for ARGV[3] ms
-- (XAUTOCLAIM). Entries of ended items are acknowledged and passed over. An item delivered
-- more than ARGV[4] times fails with ARGV[5] as its result (ARGV[6]: retention ms). An item
-- queued again while it waited for a budget (`wait.lua`) is running again once reclaimed.
-- Returns {'item', entry, id, spec, deliveries}, {'failed', id, terminal state or ''},
-- {'none'} or {'gone'}.
if redis.call('EXISTS', KEYS[1]) == 0 then return {'gone'} end
local cursor = '0-0'
for _ = 1, 32 do
  local r = redis.call('XAUTOCLAIM', KEYS[6], ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', 1)
  cursor = r[1]
  local entry = r[2][1]
  if entry then
    local eid, id = entry[1], entry[2][2]
    local s = redis.call('HGET', KEYS[3], id)
    if s == 'Q' then
      redis.call('HSET', KEYS[3], id, 'R')
      redis.call('HINCRBY', KEYS[1], 'queued', -1)
      redis.call('HINCRBY', KEYS[1], 'running', 1)
      s = 'R'
    end
    if s == 'R' then
      local d = redis.call('HINCRBY', KEYS[7], 'd:' .. id, 1)
      if d > tonumber(ARGV[4]) then
        conclude(id, 'F', ARGV[5], 0, '0')
        redis.call('XACK', KEYS[6], ARGV[1], eid)
        return {'failed', id, settle(now_ms(), tonumber(ARGV[6]))}
      end
      return {'item', eid, id, redis.call('HGET', KEYS[2], id), d}
    end
    redis.call('XACK', KEYS[6], ARGV[1], eid)
  end
  if cursor == '0-0' then return {'none'} end
end
return {'none'}
