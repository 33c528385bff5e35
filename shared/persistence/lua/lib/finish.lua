-- finish(run hash, pending, attempts, deltas, r): record a run's result and pop it off its
-- session's queue. r holds run_id, status, result, ttl_s, tenant, session_id, request_id (a
-- record that expired is re-created whole). When the session's delta channel exists, its end
-- mark goes there (NOMKSTREAM: no channel, no write), so a follower blocked on the channel
-- wakes now instead of at its next timeout; r, f, s, i, c and t make a reader from before the
-- mark take it for an empty piece of no run, which no handle gives.
local function finish(run, pending, attempts, deltas, r)
  redis.call('HSET', run, F.STATUS, r.status, F.RESULT, r.result, F.TENANT, r.tenant,
    F.SESSION_ID, r.session_id, F.REQUEST_ID, r.request_id)
  redis.call('EXPIRE', run, r.ttl_s)
  -- LREM stops at the first match from the head, where a finishing run almost always is
  redis.call('LREM', pending, 1, r.run_id)
  redis.call('DEL', attempts)
  redis.call('XADD', deltas, 'NOMKSTREAM', '*', 'k', 'e', 'e', r.run_id,
    'r', '', 'f', '0', 's', '0', 'i', '0', 'c', '0', 't', '')
end
