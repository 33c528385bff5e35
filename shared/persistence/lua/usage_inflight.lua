-- At a step boundary of a run of a budgeted tenant: set what the run used so far in its
-- tenant's in-flight record of the day (lib/inflight.lua; an empty run_id sets nothing: the run
-- used no tokens yet), then read the day and the sums of every unfinished run's usage (this
-- run's included), all in one slot and one round trip. The record expires ttl_s after its last
-- write, like the day. Returns the day's input output cached reasoning runs unpriced cost_nano,
-- then the in-flight input output cached reasoning runs unpriced cost_nano (false: none).
-- @keys day inflight
-- @argv run_id usage ttl_s
-- @include inflight
if A.run_id ~= '' and inflight_set(K.inflight, A.run_id, A.usage) then
  redis.call('EXPIRE', K.inflight, A.ttl_s)
end
local day = redis.call('HMGET', K.day, 'input', 'output', 'cached', 'reasoning', 'runs',
  'unpriced', 'cost_nano')
local running = redis.call('HMGET', K.inflight, '~input', '~output', '~cached', '~reasoning',
  '~runs', '~unpriced', '~cost_nano')
for _, v in ipairs(running) do table.insert(day, v) end
return day
