-- Begin an attempt of a run. Returns the attempt count, or -1 when a cancel was requested
-- (nothing changes).
-- @tables F S
-- @keys run attempts cancel
-- @argv worker now_ms ttl_s
if redis.call('EXISTS', K.cancel) == 1 then return -1 end
local n = redis.call('INCR', K.attempts)
redis.call('EXPIRE', K.attempts, A.ttl_s)
if redis.call('EXISTS', K.run) == 1 then
  redis.call('HSET', K.run, F.STATUS, S.RUNNING, F.WORKER, A.worker, F.STARTED_AT_MS, A.now_ms)
end
return n
