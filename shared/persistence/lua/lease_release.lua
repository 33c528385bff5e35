-- Release the lease while it is still this grant's, recording its fence as released (so the
-- next grant is not a takeover). Returns 1 when deleted.
-- @keys lease released
-- @argv lease_value fence
if redis.call('GET', K.lease) == A.lease_value then
  redis.call('SET', K.released, A.fence)
  return redis.call('DEL', K.lease)
end
return 0
