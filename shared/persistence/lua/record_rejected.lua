-- Record a run refused before it ran. Returns 1 recorded, 0 refused: a rejection never
-- rewrites an existing record (a forged message carrying a queued run's id must not fail it).
-- @tables F
-- @keys run
-- @argv status result tenant session_id request_id ttl_s
if redis.call('EXISTS', K.run) == 1 then return 0 end
redis.call('HSET', K.run, F.STATUS, A.status, F.RESULT, A.result, F.TENANT, A.tenant,
  F.SESSION_ID, A.session_id, F.REQUEST_ID, A.request_id)
redis.call('EXPIRE', K.run, A.ttl_s)
return 1
