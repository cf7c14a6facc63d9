-- ARGV: 1 batch, 2 lease token, 3 ttl ms, 4 random in [0,1), 5 #exclude, exclude...,
--       #upstreams, upstreams..., class ('interactive' | 'standard' | 'batch'), tenant,
--       join the line when refused ('1' | '0'), ticket ttl ms (also the claim ttl), characters
--       to reserve on the key's quota
-- Returns {'ok', key, expires_at, key_in_flight, key_capacity, granted_at, online_replicas}
--       | a refusal: {'full', capacity, in_flight, ms_until_soonest_expiry, quota_short}
--         | {'batch_share', limit, batch_in_flight, ms_until_soonest_batch_expiry}
--         | {'unavailable', earliest_cooldown_end or -1, now} | {'none'}
--         | {'recovering', window_end, now}
--       | {'queued', refusal...}: refused for that reason, and now waiting in line under token
--       | {'unseeded'}
if redis.call('EXISTS', K_CAP) == 0 then return {'unseeded'} end
local now = now_ms()
reap(now)
uncool(now)
local token, ttl, rnd = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local excl, ups, nups, xs, us = {}, {}, 0, {}, {}
local i = 5
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do excl[ARGV[i]] = true; xs[#xs + 1] = ARGV[i]; i = i + 1 end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do ups[ARGV[i]] = true; us[#us + 1] = ARGV[i]; nups = nups + 1; i = i + 1 end
local class, tenant, join, ticket_ttl = ARGV[i], ARGV[i + 1], ARGV[i + 2] == '1', tonumber(ARGV[i + 3])
local chars = tonumber(ARGV[i + 4]) or 0
local rank = RANKS[class] or 1
-- A live lease with this token (an idempotent retry, or a slot handed to this token's ticket
-- and not claimed yet; reaped above if expired) is answered again instead of taking a second
-- slot, its TTL counted from now: the retry may come seconds later (a store failover), and its
-- caller starts its renewal clock on this answer.
local held = redis.call('HGET', K_LEASE, token)
if held then
  local exp = tonumber(redis.call('ZSCORE', K_LEASES, token) or 0)
  if exp > now then
    if now + ttl > exp then
      exp = now + ttl
      redis.call('ZADD', K_LEASES, exp, token)
    end
    redis.call('ZREM', K_HANDED, token)
    line_take(token, false)
    return {'ok', held, exp, num(redis.call('HGET', K_INF, held)), num(redis.call('HGET', K_CAP, held)),
      granted_at(token, now), online_replicas()}
  end
  drop_lease(token) -- expired but not reaped yet (the reaping batch ran out)
end
-- Free slots go to the line before any new arrival, so the arrival never jumps it: what is
-- left free after this, no ticket near the head can use (memory.rs `acquire`).
serve(now)
local refusal
local rec = recovering(now)
if rec > 0 then
  refusal = {'recovering', rec, now}
else
  refusal = try_grant(token, ttl, rnd, excl, ups, nups, class, now, chars)
  if refusal[1] == 'ok' then
    refusal[7] = online_replicas()
    return refusal
  end
end
-- Wait in line unless waiting cannot help: no eligible key, or every eligible key disabled
-- (memory.rs `queueable`).
local hopeless = refusal[1] == 'none' or (refusal[1] == 'unavailable' and refusal[2] < 0)
if join and not hopeless then
  line_push(token, {c = rank, tn = tenant, ttl = ttl, ct = ticket_ttl, x = xs, u = us, rnd = rnd, ch = chars}, now, ticket_ttl)
  table.insert(refusal, 1, 'queued')
end
return refusal
