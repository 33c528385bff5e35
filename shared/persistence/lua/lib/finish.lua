-- finish(run hash, pending, attempts, r): record a run's result and pop it off its session's
-- queue. r holds run_id, status, result, ttl_s, tenant, session_id, request_id (a record that
-- expired is re-created whole).
local function finish(run, pending, attempts, r)
  redis.call('HSET', run, F.STATUS, r.status, F.RESULT, r.result, F.TENANT, r.tenant,
    F.SESSION_ID, r.session_id, F.REQUEST_ID, r.request_id)
  redis.call('EXPIRE', run, r.ttl_s)
  if redis.call('LINDEX', pending, 0) == r.run_id then
    redis.call('LPOP', pending)
  else
    redis.call('LREM', pending, 1, r.run_id)
  end
  redis.call('DEL', attempts)
end
