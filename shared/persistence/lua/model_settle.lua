-- Settle an admitted call: free its concurrency slot, and move the token GCRA by the difference
-- between the tokens it really used and the estimate it was admitted with (a credit never moves
-- the arrival time before now). Returns 1.
-- @keys budget inflight
-- @argv token token_delta us_per_token
redis.call('ZREM', K.inflight, A.token)
local delta = tonumber(A.token_delta) * tonumber(A.us_per_token)
if delta ~= 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local tat = math.max(tonumber(redis.call('HGET', K.budget, 'tat_tok') or '0'), now)
  redis.call('HSET', K.budget, 'tat_tok', string.format('%d', math.max(tat + delta, now)))
end
return 1
