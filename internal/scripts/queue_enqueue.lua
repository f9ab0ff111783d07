-- Admit a job by its tenant's policy and add it to the tenant's list of the
-- waiting room, against the queue's exact bound: one atomic step, so that
-- concurrent producers can never push the queue past its bound, and a job
-- refused for a full queue consumes no admission. The bound counts the
-- jobs waiting to start: in the waiting room (the depth) and in asynq's
-- pending list (handed over, or asynq's own retries that are due). A job
-- whose id is waiting in the room already is refused first, writing
-- nothing: the same check and the same step, so that of concurrent
-- producers sending one id exactly one gets in. A tenant's backlog is its
-- jobs in the waiting room.
-- Composed as prelude.lua + an algorithm's admit() (or no_admission.lua) +
-- this file. Every key carries the queue's hash tag.
-- KEYS     1 meta hash (depth: jobs in the waiting room; entries: "2"
--          once a worker that reads queue.Job.item's entries has
--          started), 2 ring of
--          tenants with work, 3 set of tenants in the ring or asleep,
--          4 weights hash, 5 the tenant's list (its length is the
--          tenant's backlog), 6 the tenant's admission state, 7 per-class
--          count of waiting jobs (for metrics), 8 ids hash (job id -> how
--          many jobs of that id are waiting), 9 asynq's pending list
-- ARGV     1 bound, 2 tenant bound (0: none), 3 tenant (encoded),
--          4 weight (1, the default, is not stored), 5 the job's entry
--          (queue.Job.item),
--          6..13 admit()'s arguments as in
--          admit_main.lua (limit, period, capacity, rl, pr, cost, "1",
--          now or ""), 14 the tenant's metrics class, 15 the job's id
-- Returns  {0, depth after, remaining, reset µs, 0} admitted and queued
--          {1, depth, bound, 0, 0} queue full
--          {2, tenant depth, tenant bound, 0, 0} tenant's backlog full
--          {3, remaining, reset µs, retry µs, 0} refused by admission
--          {4, 0, 0, 0, 0} a job of that id is waiting
-- (depth here: the room's and asynq's pending list's together)
local bound, tbound, tenant = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if redis.call('HEXISTS', KEYS[8], ARGV[15]) == 1 then return {4, 0, 0, 0, 0} end
local meta = redis.call('HMGET', KEYS[1], 'depth', 'entries')
local depth = tonumber(meta[1] or '0') + redis.call('LLEN', KEYS[9])
if depth >= bound then return {1, depth, bound, 0, 0} end
if tbound > 0 then
  local tdepth = redis.call('LLEN', KEYS[5])
  if tdepth >= tbound then return {2, tdepth, tbound, 0, 0} end
end
local now, pad = clock(ARGV[13])
local d = admit(KEYS[6], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]),
  tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), ARGV[12] == '1', now, pad)
if d[1] == 0 then return {3, d[2], d[3], d[4], 0} end
local entry = ARGV[5]
if meta[2] ~= '2' then
  -- No worker that reads this version's entries has started on the
  -- queue (queue.Server.Start sets entries): queue the bare envelope,
  -- which every version reads.
  local off, len, at = string.match(entry, '^sluice2\t(%d+):(%d+):%d+:%d+\t[^\t]+\t()')
  if off then
    off = at + tonumber(off)
    entry = string.sub(entry, off, off + tonumber(len) - 1)
  end
end
redis.call('RPUSH', KEYS[5], entry)
if redis.call('SADD', KEYS[3], tenant) == 1 then
  redis.call('RPUSH', KEYS[2], tenant)
end
if ARGV[4] ~= '1' then redis.call('HSET', KEYS[4], tenant, ARGV[4]) end
redis.call('HINCRBY', KEYS[1], 'depth', 1)
redis.call('HINCRBY', KEYS[7], ARGV[14], 1)
redis.call('HSET', KEYS[8], ARGV[15], 1)
return {0, depth + 1, d[2], d[3], 0}
