-- Admit `runs` submissions of a tenant under its budget: refused when today's tokens or cost
-- (its finished runs' and, from the in-flight record's sums, its unfinished runs' so far: the
-- figure a run's step boundary checks too) reached their limit, or when the runs would exceed
-- the per-minute rate. The rate is a GCRA
-- whose tolerance is burst_us (a minute's worth of runs may arrive at once), on the server's
-- clock (TIME). A limit of 0 is no limit; a refusal takes nothing.
-- Returns {1, '', '0', 0} admitted, or {0, budget, used, wait_us}.
-- @keys day rate inflight
-- @argv tokens_per_day cost_nano_per_day us_per_run runs burst_us
-- @reply admitted budget used wait_us
local tokens_limit, cost_limit = tonumber(A.tokens_per_day), tonumber(A.cost_nano_per_day)
if tokens_limit > 0 or cost_limit > 0 then
  local day = redis.call('HMGET', K.day, 'input', 'output', 'cost_nano')
  local running = redis.call('HMGET', K.inflight, '~input', '~output', '~cost_nano')
  -- the in-flight record is its tenant's to write: what does not read as a number is 0
  local function n(v) return tonumber(v or '0') or 0 end
  local tokens = n(day[1]) + n(day[2]) + n(running[1]) + n(running[2])
  local cost = n(day[3]) + n(running[3])
  if tokens_limit > 0 and tokens >= tokens_limit then
    return {0, 'tokens_per_day', tostring(tokens), 0}
  end
  if cost_limit > 0 and cost >= cost_limit then
    return {0, 'usd_per_day', tostring(cost), 0}
  end
end
local us_per_run = tonumber(A.us_per_run)
if us_per_run > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local tat = math.max(tonumber(redis.call('GET', K.rate) or '0'), now)
  local new_tat = tat + us_per_run * tonumber(A.runs)
  local over = new_tat - now - tonumber(A.burst_us)
  if over > 0 then return {0, 'runs_per_minute', A.runs, over} end
  redis.call('SET', K.rate, string.format('%d', new_tat), 'PX',
    math.floor((new_tat - now) / 1000) + 1000)
end
return {1, '', '0', 0}
