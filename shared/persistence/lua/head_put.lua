-- Cache a session's head, or drop the entry (entry ''). The fence check and the write are one
-- step, so a holder that lost its lease cannot write. Returns 1 written, 0 dropped.
-- @keys fence head_cache
-- @argv writer_fence entry ttl_ms
if A.entry ~= '' and redis.call('GET', K.fence) == A.writer_fence then
  redis.call('SET', K.head_cache, A.entry, 'PX', A.ttl_ms)
  return 1
end
redis.call('DEL', K.head_cache)
return 0
