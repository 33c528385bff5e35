-- Append a batch of events to a session's live stream and record a run's step checkpoint, in one
-- round trip: the checkpoint is written only when the whole batch is (an empty batch: when the
-- fence is current), so it never names an event the stream lacks. ARGV after the named ones are
-- seq/json pairs as for stream_append. Returns append_events' reply (code 0: both written).
-- @include append
-- @keys stream meta fence checkpoints
-- @argv fence max_len retention_ms run_id checkpoint ttl_s ...
-- @reply code value written
local r = append_events(K, A, 7)
if r[1] ~= 0 then return r end
redis.call('HSET', K.checkpoints, A.run_id, A.checkpoint)
redis.call('EXPIRE', K.checkpoints, A.ttl_s)
return r
