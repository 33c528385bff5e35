-- A tenant's in-flight record of one UTC day (hash): field a run id, value what that unfinished
-- run used so far, 'input,output,cached,reasoning,cost_nano,unpriced'; the '~' fields (ids never
-- hold '~') keep their sums and '~runs' their count, so a read costs the same however many runs
-- are in flight. inflight_set(key, run_id, usage) sets a run's figure (set, never added: a step
-- boundary seen again, or a retried attempt, publishes the same or a fresh figure) and returns
-- whether the record changed; inflight_drop(key, run_id) takes a run out (it finished).
local INFLIGHT_SUMS = {'~input', '~output', '~cached', '~reasoning', '~cost_nano', '~unpriced'}
-- the record is writable by its tenant: a value that is not numbers counts as zeros
local function inflight_parts(value)
  local out = {0, 0, 0, 0, 0, 0}
  if not value then return out end
  local i = 1
  for n in string.gmatch(value, '[^,]+') do
    if i > 6 then break end
    out[i] = math.floor(tonumber(n) or 0)
    i = i + 1
  end
  return out
end
local function inflight_shift(key, old, new, runs)
  local before, after = inflight_parts(old), inflight_parts(new)
  for i, field in ipairs(INFLIGHT_SUMS) do
    if after[i] ~= before[i] then redis.call('HINCRBY', key, field, after[i] - before[i]) end
  end
  if runs ~= 0 then redis.call('HINCRBY', key, '~runs', runs) end
end
local function inflight_set(key, run_id, usage)
  local old = redis.call('HGET', key, run_id)
  if old == usage then return false end
  inflight_shift(key, old, usage, old and 0 or 1)
  redis.call('HSET', key, run_id, usage)
  return true
end
local function inflight_drop(key, run_id)
  local old = redis.call('HGET', key, run_id)
  if not old then return end
  inflight_shift(key, old, false, -1)
  redis.call('HDEL', key, run_id)
end
