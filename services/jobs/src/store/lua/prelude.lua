-- Shared by every job script. KEYS (the same seven for every script, all under the job's hash
-- tag so a script runs on one slot): 1 job hash, 2 item specs, 3 item states, 4 item results,
-- 5 item order (list), 6 item stream, 7 per-item counters (`d:<id>` deliveries, `a:<id>`
-- Synthesize calls).
-- Item states: Q queued, R running, S succeeded, F failed, C cancelled.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Ends the job when no item is queued or running (once): SUCCEEDED, FAILED when any item
-- failed, CANCELLED when it was cancelled; every key of the job then expires `retention` ms
-- after the end (and it waits on no budget any more). Returns the terminal state, or '' when
-- the job goes on (or ended before).
local function settle(now, retention)
  local h = redis.call('HMGET', KEYS[1], 'state', 'queued', 'running', 'failed', 'end_ms')
  if h[5] or tonumber(h[2]) > 0 or tonumber(h[3]) > 0 then
    return ''
  end
  local state = h[1]
  if state ~= 'CANCELLED' then
    if tonumber(h[4]) > 0 then state = 'FAILED' else state = 'SUCCEEDED' end
  end
  redis.call('HSET', KEYS[1], 'state', state, 'end_ms', now, 'expire_ms', now + retention)
  redis.call('HDEL', KEYS[1], 'budget_wait')
  for i = 1, 7 do
    redis.call('PEXPIRE', KEYS[i], retention)
  end
  return state
end

-- Moves running item `id` to outcome `o` (S, F, C) with its result document.
local function conclude(id, o, result, chars, cached)
  redis.call('HSET', KEYS[3], id, o)
  redis.call('HSET', KEYS[4], id, result)
  redis.call('HINCRBY', KEYS[1], 'running', -1)
  if o == 'S' then
    redis.call('HINCRBY', KEYS[1], 'succeeded', 1)
    redis.call('HINCRBY', KEYS[1], 'characters_succeeded', chars)
    if cached == '1' then redis.call('HINCRBY', KEYS[1], 'cached_items', 1) end
  elseif o == 'F' then
    redis.call('HINCRBY', KEYS[1], 'failed', 1)
  else
    redis.call('HINCRBY', KEYS[1], 'cancelled', 1)
  end
end
