-- Claim-and-begin in one round trip: register the carried request (if any), take the session's
-- lease, read the head run (its record, checkpoint and cached head) and begin its attempt.
-- A carried request comes as the optional groups: its request-id index entry and run record
-- (KEYS), and lib/submit.lua's arguments (ARGV). The head run's keys are only known here, so
-- their prefixes (built by tether.keys) are passed in.
-- With `expect` (a run id; '' for none: a registered-only wake-up), a session holding no record of
-- that run is left untouched: no lease taken, fence -1 (TETHER_REGISTERED_RUNS_ONLY).
-- Returns {submit code, submitted run id, fence (0: held), takeover, head, record (flat list),
-- checkpoint, attempts (0: not begun), cancelled, queued runs, cached head entry}; a reply ends
-- after takeover when the lease is held or the queue is empty.
-- A takeover drops the cached head (its holder may have written the store and died before
-- caching it); any other grant reads it, so the restore needs no round trip of its own. An entry
-- over MAX_ENTRY_BYTES (tether.persistence.headcache.base: the longest a head under the largest
-- TETHER_HEAD_CACHE_MAX_BYTES packs into) or of another type is dropped unread.
-- @include submit
-- @include acquire
-- @include cached_entry
-- @tables F S
-- @keys pending lease fence released checkpoints head_cache [req_index run]
-- @argv owner ttl_ms now_ms attempts_ttl_s run_prefix cancel_prefix attempts_prefix caching expect
-- @argv [run_id request ttl_s reject tenant session_id request_id submitted_at_ms queue]
-- @reply code run_id fence takeover head record checkpoint attempts cancelled queued cached
local code, run_id = false, false
if A.run_id then code, run_id = unpack(submit(K.req_index, K.run, K.pending, A)) end
if A.expect ~= '' and redis.call('EXISTS', A.run_prefix .. A.expect) == 0 then
  return {code, run_id, -1, 0}
end
local fence, takeover = unpack(acquire(K.lease, K.fence, K.released, A.owner, A.ttl_ms))
if fence == 0 then return {code, run_id, fence, takeover} end
local caching = A.caching == '1'
if caching and takeover == 1 then redis.call('DEL', K.head_cache) end
local head = redis.call('LINDEX', K.pending, 0)
if not head then return {code, run_id, fence, takeover} end
local MAX_ENTRY_BYTES = 16005157
local cached = false
if caching and takeover ~= 1 then cached = cached_entry(K.head_cache, MAX_ENTRY_BYTES) end
local head_run = A.run_prefix .. head
local record = redis.call('HGETALL', head_run)
local checkpoint = redis.call('HGET', K.checkpoints, head)
local has_request, has_result, retry_at = false, false, 0
for i = 1, #record, 2 do
  local field = record[i]
  if field == F.REQUEST then has_request = true
  elseif field == F.RESULT then has_result = true
  elseif field == F.RETRY_AT_MS then retry_at = tonumber(record[i + 1]) or 0 end
end
local attempts, cancelled = 0, 0
if has_request and not has_result and retry_at <= tonumber(A.now_ms) then
  if redis.call('EXISTS', A.cancel_prefix .. head) == 1 then
    cancelled = 1
  else
    local counter = A.attempts_prefix .. head
    attempts = redis.call('INCR', counter)
    redis.call('EXPIRE', counter, A.attempts_ttl_s)
    redis.call('HSET', head_run, F.STATUS, S.RUNNING, F.WORKER, A.owner, F.STARTED_AT_MS, A.now_ms)
  end
end
local queued = redis.call('LLEN', K.pending)
return {code, run_id, fence, takeover, head, record, checkpoint, attempts, cancelled, queued,
  cached}
