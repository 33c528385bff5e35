-- Whether a tenant should leave a free worker to another tenant's run rather than start one more
-- run of its own for this model (the fair share of model_budget.lua, read only): the tenant
-- already has a call waiting (which takes its next turn), and another tenant that starts before
-- it has a call waiting or had one admitted in the last recent_ms (its next run is on its way
-- to a worker). Returns 1 (leave it) or 0.
-- @keys shares waiting
-- @argv tenant credit_us recent_ms
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local credit = tonumber(A.credit_us)
local system = tonumber(redis.call('HGET', K.shares, '~v') or '0')
local function start_of(tenant)
  return math.max(tonumber(redis.call('HGET', K.shares, tenant) or '0'), system - credit)
end
local active, own = {}, false
for _, member in ipairs(redis.call('ZRANGEBYSCORE', K.waiting, '(' .. now_ms, '+inf')) do
  local who = string.match(member, '^(%S+) ')
  if who == A.tenant then own = true elseif who then active[who] = true end
end
if not own then return 0 end
local fields = redis.call('HGETALL', K.shares)
for i = 1, #fields, 2 do
  local who = string.match(fields[i], '^(.+)@$')
  if who and who ~= A.tenant and now_ms - tonumber(fields[i + 1]) <= tonumber(A.recent_ms) then
    active[who] = true
  end
end
local mine = start_of(A.tenant)
for who in pairs(active) do
  if start_of(who) < mine then return 1 end
end
return 0
