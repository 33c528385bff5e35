-- Take one run of a tenant's runs-per-minute rate when a worker starts it (the worker's side of
-- the budget: a tenant's credential cannot write these keys, so no producer can skip or reset
-- it). Idempotent per run: a run taken once (the `taken` marker, kept for the rate's window
-- plus a minute) is admitted again without taking, so a retried or resumed attempt costs
-- nothing. The rate is the GCRA of tenant_admit.lua, on the server's clock (TIME); a refusal
-- takes nothing and says how long until the run fits.
-- Returns {1, 0} admitted, or {0, wait_us}.
-- @keys rate taken
-- @argv us_per_run burst_us
-- @reply admitted wait_us
if redis.call('EXISTS', K.taken) == 1 then return {1, 0} end
local us_per_run = tonumber(A.us_per_run)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = math.max(tonumber(redis.call('GET', K.rate) or '0'), now)
local new_tat = tat + us_per_run
local over = new_tat - now - tonumber(A.burst_us)
if over > 0 then return {0, over} end
redis.call('SET', K.rate, string.format('%d', new_tat), 'PX',
  math.floor((new_tat - now) / 1000) + 1000)
redis.call('SET', K.taken, '1', 'PX', math.floor((tonumber(A.burst_us) + 60000000) / 1000))
return {1, 0}
