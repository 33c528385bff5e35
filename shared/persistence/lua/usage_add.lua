-- Count one finished run's usage into its tenant's UTC day, once: the day's set of counted run
-- ids makes a second finish of the same run (a redo after a crash) a no-op. In the same step the
-- run leaves the day's in-flight record (lib/inflight.lua), so the budget check never counts
-- it twice (in flight and in the day) nor drops it between the two. The keys expire ttl_s after
-- the last run counted. Returns 1 counted now, 0 counted before.
-- @keys day counted inflight
-- @argv run_id ttl_s input output cached reasoning cost_nano unpriced
-- @include inflight
inflight_drop(K.inflight, A.run_id)
if redis.call('SADD', K.counted, A.run_id) == 0 then return 0 end
redis.call('HINCRBY', K.day, 'input', A.input)
redis.call('HINCRBY', K.day, 'output', A.output)
redis.call('HINCRBY', K.day, 'cached', A.cached)
redis.call('HINCRBY', K.day, 'reasoning', A.reasoning)
redis.call('HINCRBY', K.day, 'cost_nano', A.cost_nano)
redis.call('HINCRBY', K.day, 'runs', 1)
redis.call('HINCRBY', K.day, 'unpriced', A.unpriced)
redis.call('EXPIRE', K.day, A.ttl_s)
redis.call('EXPIRE', K.counted, A.ttl_s)
return 1
