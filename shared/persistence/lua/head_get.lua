-- Read a session's cached head entry, dropping one no put could have written (see
-- lib/cached_entry.lua). Returns the entry, or 0 (none) or 1 (dropped unread).
-- @include cached_entry
-- @keys head_cache
-- @argv max_len
local entry, dropped = cached_entry(K.head_cache, tonumber(A.max_len))
if entry then return entry end
return dropped
