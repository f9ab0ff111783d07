-- Give back a leased concurrency slot, and announce it when the slots
-- were all taken, so that callers waiting for one (WaitAcquire and the
-- queue's put-back jobs, on every process) try again at once instead of
-- when a lease would run out.
-- KEYS[1]  the sorted set of leases (see throttle_acquire.lua)
-- ARGV     1 lease id, 2 the most leases at once, 3 the channel, 4 the
--          message (the caller's key)
-- Returns  1 if the lease was held, 0 if it had run out already
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('ZCARD', KEYS[1]) + 1 >= tonumber(ARGV[2]) then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return 1
