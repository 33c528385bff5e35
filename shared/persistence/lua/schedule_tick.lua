-- Record a schedule's handled tick (its meta, and its score in its tenant's schedule set) only
-- while the schedule exists: a beat that fired a tick of a schedule removed meanwhile must not
-- bring its key back (a schedule added again under the name then inherited the old last tick,
-- and fired the ticks it "missed" at once). Returns 1 recorded, 0 the schedule is gone.
-- @keys entry schedules
-- @argv meta score name
if redis.call('HEXISTS', K.entry, 'definition') == 0 then return 0 end
redis.call('HSET', K.entry, 'meta', A.meta)
redis.call('ZADD', K.schedules, A.score, A.name)
return 1
