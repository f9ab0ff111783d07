-- A job's handler starts: the job leaves the queue's depth (the bound
-- counts a job until it starts). Idempotent: asynq's own retries of the
-- same job find it started already. Its id is no longer in the queue: a
-- new job may use it (queue_enqueue.lua).
-- KEYS     1 handed-over jobs, 2 handed-over envelopes, 3 meta hash,
--          4 per-tenant depth hash, 5 per-class depth hash, 6 ids hash
-- ARGV     1 job key (<id>@<nonce>, or the id for envelopes without a
--          nonce), 2 tenant (encoded), 3 the tenant's metrics class,
--          4 job id
-- Returns  1 counted out now, 0 already started
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('HINCRBY', KEYS[6], ARGV[4], -1) <= 0 then
  redis.call('HDEL', KEYS[6], ARGV[4])
end
redis.call('HINCRBY', KEYS[3], 'depth', -1)
if redis.call('HINCRBY', KEYS[4], ARGV[2], -1) <= 0 then
  redis.call('HDEL', KEYS[4], ARGV[2])
end
if redis.call('HINCRBY', KEYS[5], ARGV[3], -1) <= 0 then
  redis.call('HDEL', KEYS[5], ARGV[3])
end
return 1
