-- Record a run's step checkpoint unless a newer lease was granted. Returns {1, fence} saved,
-- {0, current fence} refused.
-- @keys checkpoints fence
-- @argv run_id writer_fence checkpoint ttl_s
-- @reply saved fence
local fence = tonumber(redis.call('GET', K.fence) or '0')
if tonumber(A.writer_fence) < fence then return {0, fence} end
redis.call('HSET', K.checkpoints, A.run_id, A.checkpoint)
redis.call('EXPIRE', K.checkpoints, A.ttl_s)
return {1, fence}
