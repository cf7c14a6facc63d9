-- ARGV: 1 batch, 2 n, then n pairs (key, configured capacity).
-- New keys get the configured capacity; existing keys keep live in-flight counts and an
-- admin-set capacity unless the configured capacity changed. Unlisted keys are removed.
local want = {}
local n = tonumber(ARGV[2])
for j = 0, n - 1 do
  local k, c = ARGV[3 + 2 * j], ARGV[4 + 2 * j]
  want[k] = true
  if redis.call('HGET', K_CFGCAP, k) ~= c then
    redis.call('HSET', K_CAP, k, c)
    redis.call('HSET', K_CFGCAP, k, c)
  end
  redis.call('HSETNX', K_INF, k, 0)
  refresh(k)
end
for _, k in ipairs(redis.call('HKEYS', K_CAP)) do
  if not want[k] then
    for _, h in ipairs({K_CAP, K_CFGCAP, K_INF, K_COOLWHY, K_FAILS}) do redis.call('HDEL', h, k) end
    redis.call('ZREM', K_LOAD, k)
    redis.call('ZREM', K_COOL, k)
    redis.call('SREM', K_DIS, k)
  end
end
return 1
