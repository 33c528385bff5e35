-- Begin an attempt of a run. Returns the attempt count, or -1 when a cancel was requested
-- (nothing changes).
-- @keys run attempts cancel
-- @argv worker now_ms ttl_s
if redis.call('EXISTS', K.cancel) == 1 then return -1 end
local n = redis.call('INCR', K.attempts)
redis.call('EXPIRE', K.attempts, A.ttl_s)
if redis.call('EXISTS', K.run) == 1 then
  redis.call('HSET', K.run, 'status', 'RUNNING', 'worker', A.worker, 'started_at_ms', A.now_ms)
end
return n
