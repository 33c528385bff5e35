-- Claim-and-begin in one round trip: register the carried request (if any), take the session's
-- lease, read the head run (its record, checkpoint and cached head) and begin its attempt.
-- With a carried request, KEYS[7] and KEYS[8] are its request-id index entry and run record,
-- and the nine arguments of lib/submit.lua follow the named ARGV. The head run's keys are only
-- known here, so their prefixes (built by tether.keys) are passed in.
-- Returns {submit code, submit run id, fence (0: held), takeover, head, record (flat list),
-- checkpoint, attempts (0: not begun), cancelled, queued runs, cached head entry}.
-- A takeover drops the cached head (its holder may have written the store and died before
-- caching it); any other grant reads it, so the restore needs no round trip of its own. An entry
-- over MAX_ENTRY_BYTES (tether.persistence.headcache.base: the longest a head under the largest
-- TETHER_HEAD_CACHE_MAX_BYTES packs into) or of another type is dropped unread.
-- @include submit
-- @include acquire
-- @include cached_entry
-- @keys pending lease fence released checkpoints head_cache ...
-- @argv owner ttl_ms now_ms attempts_ttl_s run_prefix cancel_prefix attempts_prefix caching carried ...
local code, submitted = false, false
if A.carried == '1' then
  local outcome = submit(KEYS[7], KEYS[8], K.pending, 9)
  code, submitted = outcome[1], outcome[2]
end
local grant = acquire(K.lease, K.fence, K.released, A.owner, A.ttl_ms)
local fence, takeover = grant[1], grant[2]
if fence == 0 then return {code, submitted, 0, 0} end
local caching = A.caching == '1'
if caching and takeover == 1 then redis.call('DEL', K.head_cache) end
local head = redis.call('LINDEX', K.pending, 0)
if not head then return {code, submitted, fence, takeover} end
local MAX_ENTRY_BYTES = 16005157
local cached = false
if caching and takeover ~= 1 then cached = cached_entry(K.head_cache, MAX_ENTRY_BYTES) end
local run = A.run_prefix .. head
local record = redis.call('HGETALL', run)
local checkpoint = redis.call('HGET', K.checkpoints, head)
local has_request, has_result, retry_at = false, false, 0
for i = 1, #record, 2 do
  local field = record[i]
  if field == 'request' then has_request = true
  elseif field == 'result' then has_result = true
  elseif field == 'retry_at_ms' then retry_at = tonumber(record[i + 1]) or 0 end
end
local attempts, cancelled = 0, 0
if has_request and not has_result and retry_at <= tonumber(A.now_ms) then
  if redis.call('EXISTS', A.cancel_prefix .. head) == 1 then
    cancelled = 1
  else
    local counter = A.attempts_prefix .. head
    attempts = redis.call('INCR', counter)
    redis.call('EXPIRE', counter, A.attempts_ttl_s)
    redis.call('HSET', run, 'status', 'RUNNING', 'worker', A.owner, 'started_at_ms', A.now_ms)
  end
end
return {code, submitted, fence, takeover, head, record, checkpoint, attempts, cancelled,
  redis.call('LLEN', K.pending), cached}
