-- Ask a run to stop. Returns a CancelOutcome value: 'unknown', 'finished', 'cancelled' (it was
-- queued) or 'requested' (it runs, and stops at its next step boundary).
-- @tables F S
-- @keys run cancel
-- @argv ttl_s
local status = redis.call('HGET', K.run, F.STATUS)
if not status then return 'unknown' end
if redis.call('HEXISTS', K.run, F.RESULT) == 1 then return 'finished' end
redis.call('SET', K.cancel, 'cancel', 'EX', A.ttl_s)
if status == S.QUEUED then return 'cancelled' end
return 'requested'
