-- Budget rows (store/budget.rs, redis/budget.rs). Runs after COUNT_REPLICAS (mod.rs `Scripts`)
-- and calendar.lua, without the pool prelude: four keys of one hash slot, the row's own.
--   KEYS[1] '<prefix>:budget:{<id>:<hex subject>}'       HASH win (period start), uc, um
--                                                        (used characters, cost micros), rc,
--                                                        rm (reserved)
--   KEYS[2] '...:res'    ZSET lease token -> reservation expiry (store clock ms)
--   KEYS[3] '...:amt'    HASH lease token -> '<characters>:<cost micros>' reserved
--   KEYS[4] '...:clock'  STRING test-only clock offset ms (absent in production)
--   ARGV[1] operation: reserve | charged | nothing | reserved | use | advance
--   ARGV[2] period (day | month)  ARGV[3] character limit (0 none)  ARGV[4] cost limit (0 none)
--   ARGV[5] lease token  ARGV[6] characters  ARGV[7] cost micros  ARGV[8] TTL or advance (ms)
-- Returns {answer, limit, uc, rc, um, rm, period end, now, online replicas}: answer 1
-- reserved / done, 0 refused; limit 'characters' | 'cost' | ''; online replicas counted
-- after a reservation only (0 otherwise).
local op = ARGV[1]
local function num(v) return tonumber(v) or 0 end

if op == 'advance' then
  redis.call('INCRBY', KEYS[4], num(ARGV[8]))
  return {1, '', 0, 0, 0, 0, 0, 0}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  + num(redis.call('GET', KEYS[4]))

local function amounts(token)
  local a = redis.call('HGET', KEYS[3], token)
  if not a then return nil end
  local c, m = string.match(a, '^(%d+):(%d+)$')
  return num(c), num(m)
end

-- Adds v to field of the row (integers only: a Lua -0 would read "-0", no integer).
local function incr(field, v)
  if v ~= 0 then redis.call('HINCRBY', KEYS[1], field, string.format('%d', v)) end
end

-- Drops the reservation of token; counts (charge_c, charge_m) as used.
local function drop(token, c, m, charge_c, charge_m)
  redis.call('HDEL', KEYS[3], token)
  redis.call('ZREM', KEYS[2], token)
  incr('rc', -c)
  incr('rm', -m)
  incr('uc', charge_c)
  incr('um', charge_m)
end

-- Expired reservations count in full as spent (the vendor may have done the work).
for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)) do
  local c, m = amounts(token)
  if c then
    drop(token, c, m, c, m)
  else
    redis.call('ZREM', KEYS[2], token)
  end
end

-- A new period starts the used amounts from 0 (calls in flight keep their reservations).
local start, untl = quota_window(ARGV[2], now)
if num(redis.call('HGET', KEYS[1], 'win')) ~= start then
  redis.call('HSET', KEYS[1], 'win', string.format('%d', start), 'uc', 0, 'um', 0)
end

local answer, limit, online = 1, '', 0
local token = ARGV[5]
if op == 'reserve' then
  local climit, mlimit = num(ARGV[3]), num(ARGV[4])
  local c, m = num(ARGV[6]), num(ARGV[7])
  if not amounts(token) then
    local h = redis.call('HMGET', KEYS[1], 'uc', 'rc', 'um', 'rm')
    local uc, rc, um, rm = num(h[1]), num(h[2]), num(h[3]), num(h[4])
    if climit > 0 and (uc >= climit or uc + rc + c > climit) then
      answer, limit = 0, 'characters'
    elseif mlimit > 0 and (um >= mlimit or um + rm + m > mlimit) then
      answer, limit = 0, 'cost'
    else
      local ttl = num(ARGV[8])
      redis.call('HSET', KEYS[3], token, string.format('%d:%d', c, m))
      redis.call('ZADD', KEYS[2], now + ttl, token)
      incr('rc', c)
      incr('rm', m)
      -- Kept past the period's end and the reservation's, in real time.
      local keep = math.max(untl - now, ttl) + DAY_MS
      for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], keep) end
      if COUNT_REPLICAS then
        for _ in string.gmatch(redis.call('INFO', 'replication'), 'state=online') do
          online = online + 1
        end
      end
    end
  end
elseif op == 'charged' or op == 'nothing' or op == 'reserved' then
  local c, m = amounts(token)
  if c then
    if op == 'charged' then
      drop(token, c, m, math.min(c, num(ARGV[6])), math.min(m, num(ARGV[7])))
    elseif op == 'nothing' then
      drop(token, c, m, 0, 0)
    else
      drop(token, c, m, c, m)
    end
  end
elseif op ~= 'use' then
  return redis.error_reply('unknown budget operation ' .. tostring(op))
end
local h = redis.call('HMGET', KEYS[1], 'uc', 'rc', 'um', 'rm')
return {answer, limit, num(h[1]), num(h[2]), num(h[3]), num(h[4]), untl, now, online}
