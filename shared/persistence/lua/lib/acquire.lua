-- acquire(lease, fence counter, released fence, owner, ttl_ms): grant the session's lease.
-- Returns {new fence, 1 when the previous grant expired unreleased (a takeover)}, or {0, 0}
-- when the lease is held. The three keys are read with one MGET (a lease key of another type,
-- which only its tenant could have left, reads as no lease and is overwritten by the grant).
-- @reply fence takeover
local function acquire(lease, counter, released, owner, ttl_ms)
  local now = redis.call('MGET', lease, counter, released)
  if now[1] then return {0, 0} end
  local last = now[2]
  local takeover = 0
  if last and last ~= now[3] then takeover = 1 end
  local fence = redis.call('INCR', counter)
  redis.call('SET', lease, owner .. '|' .. fence, 'PX', ttl_ms)
  return {fence, takeover}
end
