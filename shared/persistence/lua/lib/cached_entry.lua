-- cached_entry(head cache key, max_len): the session's cached head entry, or false and 1 when
-- an entry was there but no put could have written it, so it was dropped unread: a session's
-- keys are writable by its tenant, who could leave a value of another type or one longer than
-- any head packs into (the reader must never receive it). false and 0: no entry.
local function cached_entry(key, max_len)
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then return false, 0 end
  if kind == 'string' and redis.call('STRLEN', key) <= max_len then
    return redis.call('GET', key), 0
  end
  redis.call('DEL', key)
  return false, 1
end
