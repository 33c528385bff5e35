-- submit(req index, run hash, pending, r): register one run and queue it on its session. r is
-- the including script's A, whose @argv names run_id, request (its JSON), ttl_s, reject ('1':
-- refuse while runs are queued), tenant, session_id, request_id, submitted_at_ms and queue (the
-- broker queue serving the run; '' when unknown). Returns {code, run_id}: 1 queued, 0 duplicate
-- (run_id: the request's first run), 2 busy, 3 the run id is taken by another request (never
-- re-queued: a finished run stays finished).
-- @reply code run_id
local function submit(req, run, pending, r)
  local run_id = redis.call('GET', req)
  if run_id then return {0, run_id} end
  if redis.call('EXISTS', run) == 1 then return {3, r.run_id} end
  if r.reject == '1' and redis.call('LLEN', pending) > 0 then
    return {2, r.run_id}
  end
  redis.call('SET', req, r.run_id, 'EX', r.ttl_s)
  local fields = {F.STATUS, S.QUEUED, F.REQUEST, r.request, F.TENANT, r.tenant,
    F.SESSION_ID, r.session_id, F.REQUEST_ID, r.request_id, F.SUBMITTED_AT_MS, r.submitted_at_ms}
  if r.queue ~= '' then fields[#fields + 1] = F.QUEUE; fields[#fields + 1] = r.queue end
  redis.call('HSET', run, unpack(fields))  -- one write for the whole record
  redis.call('EXPIRE', run, r.ttl_s)
  redis.call('RPUSH', pending, r.run_id)
  return {1, r.run_id}
end
