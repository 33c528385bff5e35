-- Take the members of one timers shard due at now_ms (at most limit): each taken member's score
-- moves on to now_ms + redeliver_ms, so no other sweeper takes it before then, and it comes due
-- again then only if the taker never dropped it (it died before submitting the wake). Returns
-- the taken members.
-- @keys shard
-- @argv now_ms limit redeliver_ms
local due = redis.call('ZRANGEBYSCORE', K.shard, '-inf', A.now_ms, 'LIMIT', 0, tonumber(A.limit))
local again = tonumber(A.now_ms) + tonumber(A.redeliver_ms)
for _, member in ipairs(due) do
  redis.call('ZADD', K.shard, 'XX', again, member)
end
return due
