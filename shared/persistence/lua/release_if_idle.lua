-- Release the session's lease when its queue is empty. Returns 1 released, 0 still work to do
-- (lease kept), -1 the lease is not ours.
-- @keys lease pending released
-- @argv lease_value fence
if redis.call('GET', K.lease) ~= A.lease_value then return -1 end
if redis.call('LLEN', K.pending) > 0 then return 0 end
redis.call('SET', K.released, A.fence)
redis.call('DEL', K.lease)
return 1
