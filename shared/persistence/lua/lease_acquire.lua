-- Grant the session's lease; answers as lib/acquire.lua's acquire().
-- @include acquire
-- @keys lease fence released
-- @argv owner ttl_ms
-- @reply fence takeover
return acquire(K.lease, K.fence, K.released, A.owner, A.ttl_ms)
