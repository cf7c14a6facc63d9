-- ARGV: 1 batch. Returns {now, recovering_until (0 = not), batch_in_flight, batch_max_share,
-- then per class (interactive, standard, batch) waiters in line and the oldest one's since
-- ms (0 without), then key, capacity (ceiling), in_flight, state, cooldown_until, failures,
-- effective capacity, quota used, quota limit, quota resets at, ...}; no key
-- entries for a pool that was never seeded.
local now = now_ms()
for _ = 1, 1000 do
  if reap(now) < BATCH then break end
end
uncool(now)
serve(now)
local out = {now, recovering(now), redis.call('SCARD', K_BATCH), redis.call('GET', K_SHARE) or '1'}
for rank = 0, 2 do
  local lo, hi = rank * 2 ^ 42, (rank + 1) * 2 ^ 42 - 1
  out[#out + 1] = redis.call('ZCOUNT', K_ARRIVALS, lo, hi)
  local first = redis.call('ZRANGE', K_ARRIVALS, lo, hi, 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if #first > 0 then out[#out + 1] = tonumber(first[2]) - lo else out[#out + 1] = 0 end
end
local keys = redis.call('HKEYS', K_CAP)
table.sort(keys)
for _, k in ipairs(keys) do
  local st, untl = key_state(k, now)
  out[#out + 1] = k
  out[#out + 1] = ceiling(k)
  out[#out + 1] = num(redis.call('HGET', K_INF, k))
  out[#out + 1] = st
  out[#out + 1] = untl
  out[#out + 1] = num(redis.call('HGET', K_FAILS, k))
  out[#out + 1] = num(redis.call('HGET', K_CAP, k))
  local used, limit, resets = quota_state(k, now)
  out[#out + 1] = used
  out[#out + 1] = limit
  out[#out + 1] = resets
end
return out
