-- finish.lua, then, when the queue is left empty, release_if_idle.lua's release. Returns
-- {next head or false, release: 1 released | -1 lease not ours | 0 runs queued}.
-- @include finish
-- @tables F
-- @keys run pending attempts deltas lease released
-- @argv run_id status result ttl_s tenant session_id request_id lease_value fence
-- @reply head release
finish(K.run, K.pending, K.attempts, K.deltas, A)
local head = redis.call('LINDEX', K.pending, 0)
if head then return {head, 0} end
if redis.call('GET', K.lease) ~= A.lease_value then return {false, -1} end
redis.call('SET', K.released, A.fence)
redis.call('DEL', K.lease)
return {false, 1}
