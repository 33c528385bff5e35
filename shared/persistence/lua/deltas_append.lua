-- Append live pieces of a model's answer to a session's delta channel (ephemeral): each XADD
-- trims the stream to about max_len entries, and the channel expires ttl_ms after this append.
-- ARGV after the named ones are one group per piece: its field count, then field/value pairs.
-- Returns the number of entries added.
-- @keys channel
-- @argv max_len ttl_ms ...
local i = 3
local added = 0
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  redis.call('XADD', K.channel, 'MAXLEN', '~', A.max_len, '*', unpack(ARGV, i + 1, i + n))
  i = i + n + 1
  added = added + 1
end
redis.call('PEXPIRE', K.channel, A.ttl_ms)
return added
