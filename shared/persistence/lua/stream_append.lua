-- Append a batch of events to a session's live stream, fenced. ARGV after the named ones are
-- seq/json pairs (seqs contiguous and ascending, checked by the caller).
-- Returns {code, value, written}:
-- {0, last_seq, written} | {1, current_fence, 0} (fenced out) | {2, last_seq, 0} (gap) |
-- {3, current_fence, 0} (a fence newer than any grant: forged, refused).
-- max_len 0 = unbounded, retention_ms 0 = none.
-- @keys stream meta fence
-- @argv fence max_len retention_ms ...
-- @reply code value written
local fence = tonumber(A.fence)
local current = tonumber(redis.call('GET', K.fence) or '0')
local meta = redis.call('HMGET', K.meta, 'last_seq', 'last_fence')
local last_fence = tonumber(meta[2] or '0')
if fence < current or fence < last_fence then
  return {1, math.max(current, last_fence), 0}
end
if current > 0 and fence > current then
  return {3, current, 0}
end
local n = (#ARGV - 3) / 2
local last_seq = 0
if meta[1] then last_seq = tonumber(meta[1]) end
if n == 0 then return {0, last_seq, 0} end
local first = tonumber(ARGV[4])
local skip = 0
if meta[1] then
  if first > last_seq + 1 then return {2, last_seq, 0} end
  if fence == last_fence then
    skip = math.min(n, last_seq + 1 - first)
  end
end
if skip >= n then return {0, last_seq, 0} end
local max_len = tonumber(A.max_len)
local retention_ms = tonumber(A.retention_ms)
if retention_ms > 0 then
  -- before the XADDs: a stream whose entries are all stale then loses whole nodes, and the
  -- batch starts a fresh one. Exact (no '~'): what a reader sees is what the retention says.
  local now = redis.call('TIME')
  local cutoff_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - retention_ms
  if cutoff_ms > 0 then
    redis.call('XTRIM', K.stream, 'MINID', string.format('%d', cutoff_ms))
  end
end
for i = skip + 1, n do
  local seq = ARGV[2 + 2 * i]
  local body = ARGV[3 + 2 * i]
  if max_len > 0 then
    redis.call('XADD', K.stream, 'MAXLEN', '~', max_len, '*',
               'seq', seq, 'fence', A.fence, 'event', body)
  else
    redis.call('XADD', K.stream, '*', 'seq', seq, 'fence', A.fence, 'event', body)
  end
end
if retention_ms > 0 then
  -- a session nobody appends to keeps no live copy past the retention (the meta stays)
  redis.call('PEXPIRE', K.stream, retention_ms)
end
local new_last = ARGV[2 * n + 2]
redis.call('HSET', K.meta, 'last_seq', new_last, 'last_fence', A.fence)
return {0, tonumber(new_last), n - skip}
