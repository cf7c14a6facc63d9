-- ARGV: 1 batch. Returns {now, recovering_until (0 = not), batch_in_flight, batch_max_share,
-- key, capacity, in_flight, state, cooldown_until, failures, ...}; no key entries for a pool
-- that was never seeded.
local now = now_ms()
local reaped = 0
for _ = 1, 1000 do
  local n = reap(now)
  reaped = reaped + n
  if n < BATCH then break end
end
if reaped > 0 then wake(now) end
uncool(now)
local out = {now, recovering(now), redis.call('SCARD', K_BATCH), redis.call('GET', K_SHARE) or '1'}
local keys = redis.call('HKEYS', K_CAP)
table.sort(keys)
for _, k in ipairs(keys) do
  local st, untl = key_state(k, now)
  out[#out + 1] = k
  out[#out + 1] = num(redis.call('HGET', K_CAP, k))
  out[#out + 1] = num(redis.call('HGET', K_INF, k))
  out[#out + 1] = st
  out[#out + 1] = untl
  out[#out + 1] = num(redis.call('HGET', K_FAILS, k))
end
return out
