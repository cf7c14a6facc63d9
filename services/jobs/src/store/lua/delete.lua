-- Deletes an ended job's keys. Returns {'deleted', tenant, request key}, {'busy', state} or
-- {'gone'}.
local h = redis.call('HMGET', KEYS[1], 'state', 'end_ms', 'tenant', 'request_key')
if not h[1] then return {'gone'} end
if not h[2] then return {'busy', h[1]} end
for i = 1, 7 do redis.call('DEL', KEYS[i]) end
return {'deleted', h[3] or '', h[4] or ''}
