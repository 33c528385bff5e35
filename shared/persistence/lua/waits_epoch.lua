-- The wait index's epoch: a number each call makes larger (now_ms, or one more than it was), so
-- it never goes back unless Redis does (a rollback to a snapshot, a failover to a replica that
-- lagged). Returns the value before this call ('': the key was missing: a fresh or flushed
-- Redis) and the value written.
-- @keys epoch
-- @argv now_ms
-- @reply old new
local old = redis.call('GET', K.epoch)
local new = tonumber(A.now_ms)
if old and tonumber(old) >= new then
  new = tonumber(old) + 1
end
redis.call('SET', K.epoch, string.format('%.0f', new))
return {old or '', new}
