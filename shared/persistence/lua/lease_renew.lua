-- Extend the lease while it is still this grant's. Returns 1 when extended.
-- @keys lease
-- @argv lease_value ttl_ms
if redis.call('GET', K.lease) == A.lease_value then
  return redis.call('PEXPIRE', K.lease, A.ttl_ms)
end
return 0
