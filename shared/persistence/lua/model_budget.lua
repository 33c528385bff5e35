-- Admit one model call against its model's fleet-wide budget: no pause (a 429's Retry-After),
-- a free concurrency slot, room under the requests-per-minute and tokens-per-minute limits, and
-- its tenant's turn in the fair share of them.
-- Each rate is a GCRA with no burst: a call is admitted when the theoretical arrival time (tat)
-- has come, and pushes it by its cost times the emission interval, so any 60 s window admits at
-- most the limit plus one call. Everything in microseconds of the server's clock (TIME), which
-- every worker shares. A limit of 0 is no limit.
-- The fair share (tether.runs.limits.shares, the reference in Python): start-time fair
-- queueing. `shares` holds each tenant's virtual finish time, under `<tenant>@` when its last
-- call was admitted (ms), and under `~v` the system virtual time (the latest start admitted); `waiting` the calls refused and not yet admitted,
-- member '<tenant> <token>', score when it stops counting (ms). A call the limits have room for
-- is refused ('share') while another tenant has a waiting call that starts earlier; a tenant's
-- start is its finish time, never more than credit_us behind the system virtual time.
-- Returns {1, 0, ''} admitted (the slot is held under the token), or {0, wait_us, reason} with
-- reason 'paused', 'concurrency', 'requests', 'tokens' or 'share'.
-- @keys budget inflight pause shares waiting
-- @argv token tokens us_per_request us_per_token max_concurrent slot_ttl_ms tenant weight credit_us grace_ms call_cost_us
-- @reply admitted wait_us reason
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now / 1000)
local me = A.tenant .. ' ' .. A.token
redis.call('ZREMRANGEBYSCORE', K.waiting, '-inf', now_ms)
local function refuse(wait_us, reason)
  -- it counts as waiting until a grace after the poll it is told to make (at most 1 s away)
  local hold_ms = math.floor(math.min(wait_us / 1000, 1000)) + tonumber(A.grace_ms)
  redis.call('ZADD', K.waiting, now_ms + hold_ms, me)
  redis.call('PEXPIRE', K.waiting, 120000)
  return {0, wait_us, reason}
end
local paused = redis.call('PTTL', K.pause)
if paused > 0 then return refuse(paused * 1000, 'paused') end
local max_concurrent = tonumber(A.max_concurrent)
if max_concurrent > 0 then
  redis.call('ZREMRANGEBYSCORE', K.inflight, '-inf', now_ms)
  if redis.call('ZCARD', K.inflight) >= max_concurrent then
    return refuse(20000, 'concurrency')
  end
end
local state = redis.call('HMGET', K.budget, 'tat_req', 'tat_tok')
local us_req, us_tok = tonumber(A.us_per_request), tonumber(A.us_per_token)
local tat_req = math.max(tonumber(state[1] or '0'), now)
local tat_tok = math.max(tonumber(state[2] or '0'), now)
if us_req > 0 and tat_req > now then return refuse(tat_req - now, 'requests') end
if us_tok > 0 and tat_tok > now then return refuse(tat_tok - now, 'tokens') end
local credit = tonumber(A.credit_us)
local system = tonumber(redis.call('HGET', K.shares, '~v') or '0')
local function start_of(tenant)
  return math.max(tonumber(redis.call('HGET', K.shares, tenant) or '0'), system - credit)
end
local mine = start_of(A.tenant)
local seen = {}
for _, member in ipairs(redis.call('ZRANGE', K.waiting, 0, -1)) do
  local who = string.match(member, '^(%S+) ')
  if who and who ~= A.tenant and not seen[who] then
    seen[who] = true
    if start_of(who) < mine then return refuse(20000, 'share') end
  end
end
redis.call('HSET', K.budget, 'tat_req', string.format('%d', tat_req + us_req),
  'tat_tok', string.format('%d', tat_tok + us_tok * tonumber(A.tokens)))
redis.call('PEXPIRE', K.budget, 120000 + math.floor((tat_tok - now) / 1000))
redis.call('HSET', K.shares, A.tenant,
  string.format('%.3f', mine + tonumber(A.call_cost_us) / tonumber(A.weight)),
  '~v', string.format('%.3f', math.max(system, mine)), A.tenant .. '@', now_ms)
redis.call('PEXPIRE', K.shares, 3600000)
redis.call('ZREM', K.waiting, me)
if max_concurrent > 0 then
  redis.call('ZADD', K.inflight, now_ms + tonumber(A.slot_ttl_ms), A.token)
  redis.call('PEXPIRE', K.inflight, tonumber(A.slot_ttl_ms))
end
return {1, 0, ''}
