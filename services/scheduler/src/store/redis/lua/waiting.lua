-- ARGV: 1 batch, 2 mode: 'claim' | 'renew' | 'leave'.
-- claim / renew: 3 ticket ttl ms, 4 n, then n tokens of waiting requests. Hands free slots to
-- the line's head first (prelude.lua `serve`: slots freed by expiry or a cooldown's end that
-- no call announced), then per token: a slot handed to it is claimed ({'granted', key,
-- expires_at, key_in_flight, key_capacity, granted_at}; claim) or reported ({'handed'}; renew, which
-- never claims: the waiter does) | {'waiting'} (ticket renewed for the ttl) | {'gone'}.
-- Returns {online_replicas, answer...} ({'unseeded'} for an unknown pool).
-- leave: 3 token, 4 keep the lease ('1' | '0'); takes the ticket out of the line and, unless
-- kept, releases a lease handed or claimed under the token.
if redis.call('EXISTS', K_CAP) == 0 then return {'unseeded'} end
local now = now_ms()
reap(now)
if ARGV[2] == 'leave' then
  local token = ARGV[3]
  line_take(token, false)
  if ARGV[4] ~= '1' and redis.call('ZSCORE', K_LEASES, token) then drop_lease(token) end
  serve(now)
  return {0}
end
serve(now)
local take = ARGV[2] == 'claim'
local ttl = tonumber(ARGV[3])
local out = {0}
local claimed = false
for j = 1, tonumber(ARGV[4]) do
  local token = ARGV[4 + j]
  local k = redis.call('HGET', K_LEASE, token)
  if redis.call('ZSCORE', K_HANDED, token) and k then
    if take then
      redis.call('ZREM', K_HANDED, token)
      claimed = true
      out[#out + 1] = {'granted', k, tonumber(redis.call('ZSCORE', K_LEASES, token) or 0),
        num(redis.call('HGET', K_INF, k)), num(redis.call('HGET', K_CAP, k)), granted_at(token, now)}
    else
      out[#out + 1] = {'handed'}
    end
  elseif redis.call('HEXISTS', K_TICKETS, token) == 1 then
    redis.call('ZADD', K_TICKEXP, now + ttl, token)
    out[#out + 1] = {'waiting'}
  else
    out[#out + 1] = {'gone'}
  end
end
if claimed then out[1] = online_replicas() end
return out
