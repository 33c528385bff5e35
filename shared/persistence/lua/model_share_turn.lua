-- Whether a tenant should leave a free worker to another tenant's run rather than start one more
-- run of its own for this model (the fair share of model_budget.lua, read only): another
-- tenant has a call waiting that starts before this tenant's next, and this tenant already has
-- a call waiting, which takes its next turn. Returns 1 (leave it) or 0.
-- @keys shares waiting
-- @argv tenant credit_us
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local credit = tonumber(A.credit_us)
local system = tonumber(redis.call('HGET', K.shares, '~v') or '0')
local function start_of(tenant)
  return math.max(tonumber(redis.call('HGET', K.shares, tenant) or '0'), system - credit)
end
local mine = start_of(A.tenant)
local own, behind = false, false
for _, member in ipairs(redis.call('ZRANGEBYSCORE', K.waiting, '(' .. now_ms, '+inf')) do
  local who = string.match(member, '^(%S+) ')
  if who == A.tenant then
    own = true
  elseif who and not behind and start_of(who) < mine then
    behind = true
  end
end
if own and behind then return 1 end
return 0
