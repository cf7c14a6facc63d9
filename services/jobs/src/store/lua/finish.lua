-- Ends running item ARGV[3] (stream entry ARGV[2], group ARGV[1]) with outcome ARGV[4]
-- (S, F, C) and result document ARGV[5]; ARGV[6] its characters, ARGV[7] '1' when every
-- chunk came from the audio cache, ARGV[8] retention ms; ARGV[9..] the item's usage as
-- job-field/amount pairs added to the job's, the last ARGV its currency ('' when none said).
-- A success clears the job's budget wait (a budget let it through). Idempotent: an item that
-- is not running any more (another worker ended it) only has the entry acknowledged.
-- Returns {'ended', terminal state or ''} or {'dup'}.
local id = ARGV[3]
redis.call('XACK', KEYS[6], ARGV[1], ARGV[2])
if redis.call('HGET', KEYS[3], id) ~= 'R' then return {'dup'} end
conclude(id, ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7])
local i = 9
while i < #ARGV do
  if tonumber(ARGV[i + 1]) ~= 0 then redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
  i = i + 2
end
if #ARGV > 8 and ARGV[#ARGV] ~= '' then redis.call('HSET', KEYS[1], 'u_currency', ARGV[#ARGV]) end
if ARGV[4] == 'S' then redis.call('HDEL', KEYS[1], 'budget_wait') end
return {'ended', settle(now_ms(), tonumber(ARGV[8]))}
