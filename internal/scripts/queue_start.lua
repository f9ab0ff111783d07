-- A job's handler starts: the job leaves the queue's depth (the bound
-- counts a job until it starts). Idempotent: asynq's own retries of the
-- same job find it started already.
-- KEYS     1 handed-over jobs, 2 handed-over envelopes, 3 meta hash,
--          4 per-tenant depth hash, 5 per-class depth hash
-- ARGV     1 job id, 2 tenant (encoded), 3 the tenant's metrics class
-- Returns  1 counted out now, 0 already started
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[3], 'depth', -1)
if redis.call('HINCRBY', KEYS[4], ARGV[2], -1) <= 0 then
  redis.call('HDEL', KEYS[4], ARGV[2])
end
if redis.call('HINCRBY', KEYS[5], ARGV[3], -1) <= 0 then
  redis.call('HDEL', KEYS[5], ARGV[3])
end
return 1
