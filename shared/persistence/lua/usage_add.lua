-- Count one finished run's usage into its tenant's UTC day, once: the day's set of counted run
-- ids makes a second finish of the same run (a redo after a crash) a no-op. In the same step the
-- run leaves the day's in-flight record (lib/inflight.lua), so the budget check never counts
-- it twice (in flight and in the day) nor drops it between the two. The keys expire ttl_s after
-- the first run counted (one shard of a tenant's usage, keys.usage_shard). Returns 1 counted
-- now, 0 counted before.
-- @keys day counted inflight
-- @argv run_id ttl_s input output cached reasoning cost_nano unpriced
-- @include inflight
inflight_drop(K.inflight, A.run_id)
if redis.call('SADD', K.counted, A.run_id) == 0 then return 0 end
-- a count of 0 adds nothing (a missing field reads as 0): one write less per zero
for _, field in ipairs({'input', 'output', 'cached', 'reasoning', 'cost_nano', 'unpriced'}) do
  if tonumber(A[field]) ~= 0 then redis.call('HINCRBY', K.day, field, A[field]) end
end
redis.call('HINCRBY', K.day, 'runs', 1)
-- the day's keys take writes on that UTC day only (a run counts into the day it finished), so
-- they get their expiry once, with their first run: two writes less per run
if redis.call('SCARD', K.counted) == 1 then
  redis.call('EXPIRE', K.day, A.ttl_s)
  redis.call('EXPIRE', K.counted, A.ttl_s)
end
return 1
