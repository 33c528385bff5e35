-- Delete a purged session's leftover keys (KEYS[3] ...) unless a run took the session again
-- after its delete: the keys then belong to that run, and dropping them would lose queued work.
-- Returns the number deleted, or -1 when the session holds a lease or queued runs.
-- @keys lease pending ...
if redis.call('EXISTS', K.lease, K.pending) > 0 then
  return -1
end
if #KEYS < 3 then
  return 0
end
return redis.call('DEL', unpack(KEYS, 3))
