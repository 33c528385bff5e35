-- append_events(k, a, first): append a batch of events to a session's live stream, fenced.
-- k holds the keys stream, meta, fence; a the fence, max_len (0: unbounded) and retention_ms
-- (0: none); the batch is ARGV[first..] as seq/json pairs (seqs contiguous and ascending, checked
-- by the caller). Returns {code, value, written}: {0, last_seq, written} | {1, current_fence, 0}
-- (fenced out) | {2, last_seq, 0} (gap) | {3, current_fence, 0} (a fence newer than any grant:
-- forged, refused).
-- @reply code value written
local function append_events(k, a, first)
  local fence = tonumber(a.fence)
  local current = tonumber(redis.call('GET', k.fence) or '0')
  local meta = redis.call('HMGET', k.meta, 'last_seq', 'last_fence')
  local last_fence = tonumber(meta[2] or '0')
  if fence < current or fence < last_fence then
    return {1, math.max(current, last_fence), 0}
  end
  if current > 0 and fence > current then
    return {3, current, 0}
  end
  local n = (#ARGV - first + 1) / 2
  local last_seq = 0
  if meta[1] then last_seq = tonumber(meta[1]) end
  if n == 0 then return {0, last_seq, 0} end
  local first_seq = tonumber(ARGV[first])
  local skip = 0
  if meta[1] then
    if first_seq > last_seq + 1 then return {2, last_seq, 0} end
    if fence == last_fence then
      skip = math.min(n, last_seq + 1 - first_seq)
    end
  end
  if skip >= n then return {0, last_seq, 0} end
  local max_len = tonumber(a.max_len)
  local retention_ms = tonumber(a.retention_ms)
  if retention_ms > 0 then
    -- before the XADDs: a stream whose entries are all stale then loses whole nodes, and the
    -- batch starts a fresh one. Exact (no '~'): what a reader sees is what the retention says.
    local now = redis.call('TIME')
    local cutoff_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - retention_ms
    if cutoff_ms > 0 then
      redis.call('XTRIM', k.stream, 'MINID', string.format('%d', cutoff_ms))
    end
  end
  for i = skip + 1, n do
    local seq = ARGV[first + 2 * i - 2]
    local body = ARGV[first + 2 * i - 1]
    if max_len > 0 then
      redis.call('XADD', k.stream, 'MAXLEN', '~', max_len, '*',
                 'seq', seq, 'fence', a.fence, 'event', body)
    else
      redis.call('XADD', k.stream, '*', 'seq', seq, 'fence', a.fence, 'event', body)
    end
  end
  if retention_ms > 0 then
    -- a session nobody appends to keeps no live copy past the retention (the meta stays)
    redis.call('PEXPIRE', k.stream, retention_ms)
  end
  local new_last = ARGV[first + 2 * n - 2]
  redis.call('HSET', k.meta, 'last_seq', new_last, 'last_fence', a.fence)
  return {0, tonumber(new_last), n - skip}
end
