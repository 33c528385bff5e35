-- cached_entry(head cache key, max_len): the session's cached head entry, or false and 1 when
-- an entry was there but no put could have written it, so it was dropped unread: a session's
-- keys are writable by its tenant, who could leave a value of another type or one longer than
-- any head packs into (the reader must never receive it). false and 0: no entry.
-- One GETRANGE reads at most one byte past max_len (so a longer value is never copied whole)
-- and tells the cases apart: '' is no entry (a put never writes an empty one), an error reply
-- another type, max_len + 1 bytes a value too long.
local function cached_entry(key, max_len)
  local entry = redis.pcall('GETRANGE', key, 0, max_len)
  if type(entry) == 'string' then
    if entry == '' then return false, 0 end
    if #entry <= max_len then return entry, 0 end
  end
  redis.call('DEL', key)
  return false, 1
end
