-- Put a job back at the head of its tenant's list: its handler was
-- throttled before it started, or it ran and must run again later without
-- spending a retry (a 429). A job still among the handed-over (asynq gave
-- it to a worker, and no reconcile has counted it out yet) only leaves
-- them; one counted out is counted in the depth again, and its id is in
-- the queue again (another job of that id enqueued meanwhile keeps its
-- own count).
-- Optionally the tenant sleeps until a time.
-- KEYS     1 the tenant's list, 2 handed-over jobs, 3 handed-over
--          jobs' hinfo, 4 ring, 5 set of tenants in the ring or asleep,
--          6 sleeping tenants, 7 meta hash, 8 per-tenant depth hash,
--          9 per-class depth hash, 10 ids hash
-- ARGV     1 job key (<id>@<nonce>, or the id for envelopes without a
--          nonce), 2 the envelope to put back, 3 tenant (encoded),
--          4 sleep (µs, 0: none), 5 now in µs or "" for TIME, 6 the
--          tenant's metrics class, 7 job id
-- Uses     prelude.lua (int, clock)
-- Returns  1
local now = clock(ARGV[5])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[3], ARGV[1])
else
  redis.call('HINCRBY', KEYS[7], 'depth', 1)
  redis.call('HINCRBY', KEYS[8], ARGV[3], 1)
  redis.call('HINCRBY', KEYS[9], ARGV[6], 1)
  redis.call('HINCRBY', KEYS[10], ARGV[7], 1)
end
redis.call('LPUSH', KEYS[1], ARGV[2])
local sleep = tonumber(ARGV[4])
if redis.call('SADD', KEYS[5], ARGV[3]) == 1 then
  if sleep > 0 then
    redis.call('ZADD', KEYS[6], int(now + sleep), ARGV[3])
  else
    redis.call('RPUSH', KEYS[4], ARGV[3])
  end
elseif sleep > 0 then
  -- In the ring already: move it to the sleepers (it is near the tail,
  -- where LREM with a negative count starts).
  if redis.call('LREM', KEYS[4], -1, ARGV[3]) == 1 then
    redis.call('ZADD', KEYS[6], int(now + sleep), ARGV[3])
  else
    redis.call('ZADD', KEYS[6], 'GT', int(now + sleep), ARGV[3])
  end
end
return 1
