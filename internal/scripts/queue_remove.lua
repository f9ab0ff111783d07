-- Remove one job from the waiting room, an operator's edit
-- (queue.Inspector.Delete, Cancel), keeping the room's counts exact: the
-- depth, the job's class's count, its id's count (a recorded id) and, for
-- a job for later, its tenant's count of them; its record in the jobs
-- hash goes too. A tenant whose list this empties stays in the ring until
-- a claim finds the list empty, as after any claim.
-- KEYS     1 the tenant's list, 2 jobs for later, 3 meta hash, 4 per-class
--          count of waiting jobs, 5 ids hash, 6 per-tenant count of jobs
--          for later, 7 jobs hash (queue_enqueue.lua)
-- ARGV     1 "list" (a waiting job) or "later" (a job for later), 2 the
--          list's entry, or the sorted set's member (<tenant> SPACE
--          <entry>), exactly, 3 tenant (encoded), 4 the job's metrics
--          class, 5 its scoped id if recorded in the ids hash (else ""),
--          6 its scoped id, 7 its hand-over, <nonce>:<moves>
-- Returns  1 removed, 0 not there (a claim took it meanwhile)
if ARGV[1] == 'list' then
  if redis.call('LREM', KEYS[1], 1, ARGV[2]) == 0 then return 0 end
else
  if redis.call('ZREM', KEYS[2], ARGV[2]) == 0 then return 0 end
  if redis.call('HINCRBY', KEYS[6], ARGV[3], -1) <= 0 then redis.call('HDEL', KEYS[6], ARGV[3]) end
end
if redis.call('HINCRBY', KEYS[3], 'depth', -1) < 0 then redis.call('HSET', KEYS[3], 'depth', 0) end
if ARGV[4] ~= 'default' and redis.call('HINCRBY', KEYS[4], ARGV[4], -1) <= 0 then
  redis.call('HDEL', KEYS[4], ARGV[4])
end
if ARGV[5] ~= '' and redis.call('HINCRBY', KEYS[5], ARGV[5], -1) <= 0 then
  redis.call('HDEL', KEYS[5], ARGV[5])
end
local rec = redis.call('HGET', KEYS[7], ARGV[6])
local function job(hand) return string.match(hand or '', '^([^:]*):') end
if rec and job(string.match(rec, '^[^ ]*')) == job(ARGV[7]) then redis.call('HDEL', KEYS[7], ARGV[6]) end
-- A tenant with nothing left waiting keeps no sequence (queue_record.lua).
if redis.call('LLEN', KEYS[1]) == 0 and redis.call('HEXISTS', KEYS[6], ARGV[3]) == 0 then
  redis.call('HDEL', KEYS[7], ARGV[3])
end
return 1
