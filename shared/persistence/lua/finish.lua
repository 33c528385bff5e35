-- Finish a run: record its result and pop it. Returns the run id now at the head of the
-- session's queue (nil: the queue is empty).
-- @include finish
-- @tables F
-- @keys run pending attempts deltas
-- @argv run_id status result ttl_s tenant session_id request_id
finish(K.run, K.pending, K.attempts, K.deltas, A)
return redis.call('LINDEX', K.pending, 0)
