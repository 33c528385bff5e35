-- Admit one model call against its model's fleet-wide budget: no pause (a 429's Retry-After),
-- a free concurrency slot, and room under the requests-per-minute and tokens-per-minute limits.
-- Each rate is a GCRA with no burst: a call is admitted when the theoretical arrival time (tat)
-- has come, and pushes it by its cost times the emission interval, so any 60 s window admits at
-- most the limit plus one call. Everything in microseconds of the server's clock (TIME), which
-- every worker shares. A limit of 0 is no limit.
-- Returns {1, 0, ''} admitted (the slot is held under the token), or {0, wait_us, reason} with
-- reason 'paused', 'concurrency', 'requests' or 'tokens'.
-- @keys budget inflight pause
-- @argv token tokens us_per_request us_per_token max_concurrent slot_ttl_ms
-- @reply admitted wait_us reason
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local paused = redis.call('PTTL', K.pause)
if paused > 0 then return {0, paused * 1000, 'paused'} end
local max_concurrent = tonumber(A.max_concurrent)
if max_concurrent > 0 then
  redis.call('ZREMRANGEBYSCORE', K.inflight, '-inf', math.floor(now / 1000))
  if redis.call('ZCARD', K.inflight) >= max_concurrent then
    return {0, 20000, 'concurrency'}
  end
end
local state = redis.call('HMGET', K.budget, 'tat_req', 'tat_tok')
local us_req, us_tok = tonumber(A.us_per_request), tonumber(A.us_per_token)
local tat_req = math.max(tonumber(state[1] or '0'), now)
local tat_tok = math.max(tonumber(state[2] or '0'), now)
if us_req > 0 and tat_req > now then return {0, tat_req - now, 'requests'} end
if us_tok > 0 and tat_tok > now then return {0, tat_tok - now, 'tokens'} end
redis.call('HSET', K.budget, 'tat_req', string.format('%d', tat_req + us_req),
  'tat_tok', string.format('%d', tat_tok + us_tok * tonumber(A.tokens)))
redis.call('PEXPIRE', K.budget, 120000 + math.floor((tat_tok - now) / 1000))
if max_concurrent > 0 then
  redis.call('ZADD', K.inflight, math.floor(now / 1000) + tonumber(A.slot_ttl_ms), A.token)
  redis.call('PEXPIRE', K.inflight, tonumber(A.slot_ttl_ms))
end
return {1, 0, ''}
