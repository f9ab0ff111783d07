-- Jobs' handlers start: each job leaves the queue's depth (the bound
-- counts a job until it starts). One call records the starts of a batch
-- of jobs (a worker's concurrent starts, group-committed), one after the
-- other, exactly as one call per job in that order would. Idempotent:
-- asynq's own retries of the same job find it started already. Its id is
-- no longer in the queue: a new job may use it (queue_enqueue.lua).
-- KEYS     1 handed-over jobs, 2 handed-over envelopes, 3 meta hash,
--          4 per-tenant depth hash, 5 per-class depth hash, 6 ids hash
-- ARGV     per job, four arguments: job key (<id>@<nonce>, or the id for
--          envelopes without a nonce), tenant (encoded), the tenant's
--          metrics class, job id
-- Returns  per job, in order: 1 counted out now, 0 already started
local out, started = {}, 0
for i = 1, #ARGV - 3, 4 do
  local key, tenant, class, id = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('ZREM', KEYS[1], key) == 0 then
    out[#out + 1] = 0
  else
    redis.call('HDEL', KEYS[2], key)
    if redis.call('HINCRBY', KEYS[6], id, -1) <= 0 then
      redis.call('HDEL', KEYS[6], id)
    end
    if redis.call('HINCRBY', KEYS[4], tenant, -1) <= 0 then
      redis.call('HDEL', KEYS[4], tenant)
    end
    if redis.call('HINCRBY', KEYS[5], class, -1) <= 0 then
      redis.call('HDEL', KEYS[5], class)
    end
    started = started + 1
    out[#out + 1] = 1
  end
end
if started > 0 then
  redis.call('HINCRBY', KEYS[3], 'depth', -started)
end
return out
