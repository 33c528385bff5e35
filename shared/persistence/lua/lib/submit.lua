-- submit(req index, run hash, pending, a): register one run and queue it on its session. Its
-- nine arguments are ARGV[a+1] .. ARGV[a+9]: run_id, request json, ttl_s, reject (0/1), tenant,
-- session_id, request_id, submitted_at_ms, queue (the broker queue serving the run; '' when
-- unknown). Returns {code, run_id}: 1 queued, 0 duplicate, 2 busy, 3 the run id is taken by
-- another request (never re-queued: a finished run stays finished).
local function submit(req, run, pending, a)
  local existing = redis.call('GET', req)
  if existing then return {0, existing} end
  if redis.call('EXISTS', run) == 1 then return {3, ARGV[a + 1]} end
  if ARGV[a + 4] == '1' and redis.call('LLEN', pending) > 0 then
    return {2, ARGV[a + 1]}
  end
  redis.call('SET', req, ARGV[a + 1], 'EX', ARGV[a + 3])
  redis.call('HSET', run, 'status', 'QUEUED', 'request', ARGV[a + 2], 'tenant', ARGV[a + 5],
    'session_id', ARGV[a + 6], 'request_id', ARGV[a + 7], 'submitted_at_ms', ARGV[a + 8])
  if ARGV[a + 9] ~= '' then redis.call('HSET', run, 'queue', ARGV[a + 9]) end
  redis.call('EXPIRE', run, ARGV[a + 3])
  redis.call('RPUSH', pending, ARGV[a + 1])
  return {1, ARGV[a + 1]}
end
