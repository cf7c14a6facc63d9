-- Fill locks (store/fill.rs, redis/fill.rs). Runs without the pool prelude: two keys of one
-- hash slot, the fill key's own.
--   KEYS[1] '<prefix>:fill:{<key>}'        STRING the holder's fill id, PX = its TTL + offset
--   KEYS[2] '<prefix>:fill:{<key>}:clock'  STRING test-only clock offset ms (absent in
--                                          production)
--   ARGV[1] operation: acquire | renew | release | holder | advance
--   ARGV[2] fill id   ARGV[3] TTL or advance (ms)   ARGV[4] release channel   ARGV[5] the key
-- A lock is held while its PTTL exceeds the key's clock offset: with no offset (production)
-- that is Redis's own expiry (SET NX PX, compare-and-PEXPIRE, compare-and-DEL); a test that
-- moves the key's clock by d ms brings every lock of the key d ms closer to its end.
local op, id = ARGV[1], ARGV[2]
local off = tonumber(redis.call('GET', KEYS[2]) or '0') or 0

-- How long the lock has left on the key's clock (<= 0: nobody holds it). A key without an
-- expiry is no lock of ours: treated as ended.
local function left()
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    return 0
  end
  return pttl - off
end

if op == 'acquire' then
  local ttl = tonumber(ARGV[3])
  if redis.call('SET', KEYS[1], id, 'NX', 'PX', ttl + off) then
    return {1, ttl, ''}
  end
  local l = left()
  if l > 0 then
    return {0, l, redis.call('GET', KEYS[1])}
  end
  -- Its holder's TTL ended on this key's clock: taken over.
  redis.call('SET', KEYS[1], id, 'PX', ttl + off)
  return {1, ttl, ''}
elseif op == 'renew' then
  if redis.call('GET', KEYS[1]) == id and left() > 0 then
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + off)
    return 1
  end
  return 0
elseif op == 'release' then
  if redis.call('GET', KEYS[1]) == id then
    local held = left() > 0
    redis.call('DEL', KEYS[1])
    if held then
      redis.call('PUBLISH', ARGV[4], ARGV[5])
      return 1
    end
  end
  return 0
elseif op == 'holder' then
  local l = left()
  if l > 0 then
    return {redis.call('GET', KEYS[1]), l}
  end
  return {}
elseif op == 'advance' then
  redis.call('INCRBY', KEYS[2], tonumber(ARGV[3]))
  return 1
end
return redis.error_reply('unknown fill operation ' .. tostring(op))
