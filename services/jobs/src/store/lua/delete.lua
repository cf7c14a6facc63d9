-- Deletes an ended, summarized job's keys. Returns {'deleted', tenant, request key},
-- {'busy', state} (items not ended), {'finishing', state} (ended, its summary not written yet:
-- deleting now would let the finalizer write it into a deleted job's folder) or {'gone'}.
local h = redis.call('HMGET', KEYS[1], 'state', 'end_ms', 'tenant', 'request_key', 'summary')
if not h[1] then return {'gone'} end
if not h[2] then return {'busy', h[1]} end
if not h[5] then return {'finishing', h[1]} end
for i = 1, 7 do redis.call('DEL', KEYS[i]) end
return {'deleted', h[3] or '', h[4] or ''}
