-- Rewrite a session's live stream at rest in place: the same entries, IDs, last ID and TTL,
-- without the room Redis (7.0 on) set aside in its newest node for appends to come (up to
-- stream-node-max-bytes, 4 KB by default: more than a short session's events themselves). Only
-- a stream of at most max_entries entries: DUMP and RESTORE copy the whole stream, and a long
-- stream's slack is a small part of it. A blocked XREAD keeps waiting for entries after the
-- same last ID. Returns the stream's length, or -1 when it was left as it was.
-- @keys stream
-- @argv max_entries
local n = redis.call('XLEN', K.stream)
if n == 0 or n > tonumber(A.max_entries) then return -1 end
local ttl_ms = redis.call('PTTL', K.stream)
if ttl_ms < 0 then ttl_ms = 0 end
redis.call('RESTORE', K.stream, ttl_ms, redis.call('DUMP', K.stream), 'REPLACE')
return n
