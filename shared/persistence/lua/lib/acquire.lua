-- acquire(lease, fence counter, released fence, owner, ttl_ms): grant the session's lease.
-- Returns {new fence, 1 when the previous grant expired unreleased (a takeover)}, or {0, 0}
-- when the lease is held.
-- @reply fence takeover
local function acquire(lease, counter, released, owner, ttl_ms)
  if redis.call('EXISTS', lease) == 1 then return {0, 0} end
  local last = redis.call('GET', counter)
  local takeover = 0
  if last and last ~= redis.call('GET', released) then takeover = 1 end
  local fence = redis.call('INCR', counter)
  redis.call('SET', lease, owner .. '|' .. fence, 'PX', ttl_ms)
  return {fence, takeover}
end
