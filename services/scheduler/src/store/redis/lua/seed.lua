-- ARGV: 1 batch, 2 recovery window ms, 3 batch_max_share, 4 adaptive '1'|'0', 5 n, then n
-- triples (key, configured capacity, quota '<characters>:<day|month>' or '' for none).
-- A quota's use so far is kept across seeds.
-- New keys get the configured capacity; existing keys keep live in-flight counts and an
-- admin-set capacity (and what adaptation learned) unless the configured capacity changed.
-- A pool that does not adapt grants against the ceiling. Unlisted keys are removed.
-- A pool absent from the store (never seeded, or its state was lost: a restart without
-- persistence, FLUSHALL, a replica promoted without it) opens a recovery window: grants wait
-- until it ends while live leases re-register by renewing (renew.lua).
if redis.call('EXISTS', K_CAP) == 0 then
  local window = tonumber(ARGV[2])
  if window > 0 then redis.call('SET', K_REC, now_ms() + window) end
end
redis.call('SET', K_SHARE, ARGV[3])
redis.call('SET', K_ADAPTIVE, ARGV[4])
local want = {}
local n = tonumber(ARGV[5])
for j = 0, n - 1 do
  local k, c, q = ARGV[6 + 3 * j], ARGV[7 + 3 * j], ARGV[8 + 3 * j]
  if q == '' then redis.call('HDEL', K_QUOTA, k) else redis.call('HSET', K_QUOTA, k, q) end
  want[k] = true
  if redis.call('HGET', K_CFGCAP, k) ~= c then
    redis.call('HSET', K_CAP, k, c)
    redis.call('HSET', K_CFGCAP, k, c)
    redis.call('HSET', K_CEIL, k, c)
  end
  redis.call('HSETNX', K_CEIL, k, num(redis.call('HGET', K_CAP, k)))
  if ARGV[4] == '0' then redis.call('HSET', K_CAP, k, ceiling(k)) end
  redis.call('HSETNX', K_INF, k, 0)
  refresh(k)
end
for _, k in ipairs(redis.call('HKEYS', K_CAP)) do
  if not want[k] then
    for _, h in ipairs({K_CAP, K_CFGCAP, K_INF, K_COOLWHY, K_FAILS, K_CEIL, K_ADAPTED, K_LOWERED,
        K_QUOTA, K_QUSED, K_QSTART, K_PROBE}) do
      redis.call('HDEL', h, k)
    end
    redis.call('ZREM', K_LOAD, k)
    redis.call('ZREM', K_COOL, k)
    redis.call('SREM', K_DIS, k)
  end
end
if redis.call('EXISTS', K_CAP) == 1 then serve(now_ms()) end
return 1
