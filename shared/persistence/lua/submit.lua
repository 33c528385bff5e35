-- Register one run and queue it on its session; answers as lib/submit.lua's submit().
-- @include submit
-- @tables F S
-- @keys req_index run pending
-- @argv run_id request ttl_s reject tenant session_id request_id submitted_at_ms queue
-- @reply code run_id
return submit(K.req_index, K.run, K.pending, A)
