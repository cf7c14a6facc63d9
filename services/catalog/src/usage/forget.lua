-- Removes from the usage consumer group the consumers silent longer than the claim idle time
-- that own no pending entry (dead replicas' names; their entries were taken over), except the
-- caller. One script, so a consumer that reads between the look and the removal keeps its
-- name and its entries.
-- KEYS[1] the usage stream; ARGV[1] the group, ARGV[2] idle ms, ARGV[3] the caller's name.
-- Returns the names removed.
local removed = {}
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local field = {}
  for i = 1, #consumer, 2 do
    field[consumer[i]] = consumer[i + 1]
  end
  if field['name'] ~= ARGV[3] and field['pending'] == 0
      and field['idle'] > tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], field['name'])
    table.insert(removed, field['name'])
  end
end
return removed
