-- Append one signal to a session's mailbox, unless it holds max_signals already, and return the
-- session's wait records as they are at that instant (one script: a worker that parks a call
-- after it finds the signal in the mailbox, one that parked before is seen here). Returns the
-- new signal's id ('' when the mailbox is full) and the wait records.
-- @keys mailbox waits
-- @argv name payload sent_at_ms max_signals
-- @reply signal_id waits
if redis.call('XLEN', K.mailbox) >= tonumber(A.max_signals) then
  return {'', {}}
end
local id = redis.call('XADD', K.mailbox, '*', 'name', A.name, 'payload', A.payload,
  'sent_at_ms', A.sent_at_ms)
return {id, redis.call('HVALS', K.waits)}
