-- Undo begin.lua for an attempt handed back unfinished. Returns 1 handed back, 0 nothing to
-- undo (no record, or the run already has its result).
-- @tables F S
-- @keys run attempts
if redis.call('EXISTS', K.run) == 0 or redis.call('HEXISTS', K.run, F.RESULT) == 1 then
  return 0
end
if tonumber(redis.call('GET', K.attempts) or '0') > 0 then redis.call('DECR', K.attempts) end
redis.call('HSET', K.run, F.STATUS, S.QUEUED)
return 1
