-- Put a job back at the head of its tenant's list: its handler was
-- throttled before it started, or it ran and must run again later without
-- spending a retry (a 429). It is in the waiting room again: in its
-- tenant's backlog and its class's count. A job whose entry is still
-- among the handed-over (asynq gave it to a worker, and no reconcile has
-- counted it out yet) only loses the entry; one counted out is counted in
-- the depth again, and its id is in the queue again (another job of that
-- id enqueued meanwhile keeps its own count). Either way the depth is
-- right: were the entry missed, it would be counted out later, once.
-- Optionally the tenant sleeps until a time.
-- KEYS     1 the tenant's list, 2 handed-over jobs' entries, 3 ring, 4 set
--          of tenants in the ring or asleep, 5 sleeping tenants, 6 meta
--          hash, 7 per-class count of waiting jobs, 8 ids hash
-- ARGV     1 the job's entry of its last hand-over ("<task id> <id>"),
--          2 the envelope to put back, 3 tenant (encoded), 4 sleep (µs,
--          0: none), 5 now in µs or "" for TIME, 6 the job's metrics
--          class, 7 job id
-- Uses     prelude.lua (int, clock)
-- Returns  1
local now = clock(ARGV[5])
-- The entry, if there, is near the head: asynq gives out jobs in the
-- order of their entries.
if redis.call('LREM', KEYS[2], 1, ARGV[1]) == 0 then
  redis.call('HINCRBY', KEYS[6], 'depth', 1)
  redis.call('HINCRBY', KEYS[8], ARGV[7], 1)
end
redis.call('HINCRBY', KEYS[7], ARGV[6], 1)
redis.call('LPUSH', KEYS[1], ARGV[2])
local sleep = tonumber(ARGV[4])
if redis.call('SADD', KEYS[4], ARGV[3]) == 1 then
  if sleep > 0 then
    redis.call('ZADD', KEYS[5], int(now + sleep), ARGV[3])
  else
    redis.call('RPUSH', KEYS[3], ARGV[3])
  end
elseif sleep > 0 then
  -- In the ring already: move it to the sleepers (it is near the tail,
  -- where LREM with a negative count starts).
  if redis.call('LREM', KEYS[3], -1, ARGV[3]) == 1 then
    redis.call('ZADD', KEYS[5], int(now + sleep), ARGV[3])
  else
    redis.call('ZADD', KEYS[5], 'GT', int(now + sleep), ARGV[3])
  end
end
return 1
