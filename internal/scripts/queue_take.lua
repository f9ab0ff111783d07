-- Take a tenant's oldest job out of the waiting room to hand it to asynq,
-- if it is still the job the dispatcher claimed. The job stays counted in
-- the queue's depth until its handler starts (queue_start.lua), and is
-- remembered as handed over, so that a dispatcher that dies before asynq
-- has it does not lose it (queue_untake.lua puts it back).
-- KEYS     1 the tenant's list, 2 handed-over jobs (sorted set: job id by
--          hand-over time, µs), 3 handed-over envelopes (hash by job key)
-- ARGV     1 the claimed envelope, 2 the job key (<id>@<nonce>, or the id
--          for envelopes without a nonce), 3 now in µs or "" for TIME
-- Uses     prelude.lua (int, clock)
-- Returns  1 taken, 0 the head changed (another dispatcher took it)
local now = clock(ARGV[3])
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[1] then return 0 end
redis.call('LPOP', KEYS[1])
redis.call('ZADD', KEYS[2], int(now), ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1])
return 1
