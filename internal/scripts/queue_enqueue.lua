-- Admit a job by its tenant's policy and add it to the tenant's list of the
-- waiting room, against the queue's exact bound: one atomic step, so that
-- concurrent producers can never push the queue past its bound, and a job
-- refused for a full queue consumes no admission. The bound counts the
-- jobs waiting to start: in the waiting room (the depth) and in asynq's
-- pending list (handed over, or asynq's own retries that are due). A job
-- whose id is waiting in the room already, or handed over and not
-- started yet, is refused first, writing nothing: the same check and the same step, so that of concurrent
-- producers sending one id exactly one gets in. A tenant's backlog is its
-- jobs in the waiting room, due or for later. A job due later waits in
-- the sorted set of jobs for later until a claim (queue_claim.lua) moves
-- it to the tail of its tenant's list. A periodic job's tick
-- (queue.Producer.EnqueueTick) is claimed first, in the same step: of the
-- workers that race for one tick of a schedule exactly one gets past it,
-- and the tick stays spent whatever the rest of the script answers, so
-- that a tick is tried once across the fleet.
-- Composed as prelude.lua + an algorithm's admit() (or no_admission.lua) +
-- this file. Every key carries the queue's hash tag.
-- KEYS     1 meta hash (depth: jobs in the waiting room), 2 ring of
--          tenants with work, 3 set of tenants in the ring or asleep,
--          4 the tenant's list (its length is the tenant's backlog),
--          5 asynq's pending list, 6 the tenant's admission state (unused
--          for a tenant without a policy), 7 weights hash, 8 per-class
--          count of waiting jobs, 9 ids hash (scoped job id, tenant/id as
--          queue.Job.ScopedID writes it -> how many jobs of it are waiting),
--          10 jobs for later, 11 per-tenant count of jobs for later,
--          12 ticks hash (schedule name -> its last tick claimed, µs),
--          13 held ids (scoped id -> until when, µs: a job of it handed
--          over and not started; see queue_handover.lua), 14 jobs hash
--          (scoped id -> "<nonce>:<moves> <seq> <due µs>", and encoded tenant
--          -> its last seq: queue/inspect.go)
-- ARGV     1 tenant (encoded), 2 the job's entry (queue.Job.item),
--          3 bound, 4 cost, 5..9 the tenant's policy as admit() takes it
--          (limit, period, capacity, rl, pr; see admit_main.lua), all ""
--          for a tenant without one, 10 tenant bound (0: none),
--          11 weight (1 is not stored), 12 the tenant's metrics class
--          ("default" is not counted), 13 the job's scoped id
--          (queue.Job.ScopedID; "" for an id the producer chose, which is
--          not recorded), 14 now in µs
--          ("" for the server's TIME), 15 when the job is due, in µs
--          ("0": at once), 16 the schedule's name ("" for a job that
--          is no schedule's tick), 17 the tick, in µs, 18 the job's
--          hand-over, <nonce>:<moves> (its task id is sluice:<scoped
--          id>@ and that), 19 the job's scoped id, recorded or not
-- Returns  {"queued", depth after, remaining, reset µs}   admitted, queued
--          {"full", depth, bound, 0}                  queue (shard) full
--          {"tenant_full", tenant depth, tenant bound, 0}  tenant's backlog full
--          {"limited", remaining, reset µs, retry µs} refused by admission
--          {"duplicate", 0, 0, 0}                     a job of that id waits
--          {"tick_taken", last tick µs, 0, 0}         the tick was claimed
-- (depth here: the room's and asynq's pending list's together)
local tenant, bound, id = ARGV[1], tonumber(ARGV[3]), ARGV[13]
if ARGV[16] ~= '' then
  local last = tonumber(redis.call('HGET', KEYS[12], ARGV[16]) or '-1')
  if last >= tonumber(ARGV[17]) then return {'tick_taken', last, 0, 0} end
  redis.call('HSET', KEYS[12], ARGV[16], ARGV[17])
end
local tbound = tonumber(ARGV[10])
-- An id is taken by a job of it handed over and not started yet (held,
-- until a time should its worker never say: queue_handover.lua), or
-- waiting. Then the id is recorded and the depth counted, each in the one
-- command that also checks it; a refusal below takes them back, so that
-- the common case, an accepted job, costs no extra command.
-- An empty id is one the producer chose at random, which no other job
-- can have: it is neither looked up nor recorded.
if id ~= '' then
  local held = redis.call('ZSCORE', KEYS[13], id)
  if held and tonumber(held) > clock(ARGV[14]) then return {'duplicate', 0, 0, 0} end
  if redis.call('HSETNX', KEYS[9], id, 1) == 0 then return {'duplicate', 0, 0, 0} end
end
local room = redis.call('HINCRBY', KEYS[1], 'depth', 1) - 1
local function refuse(r)
  redis.call('HINCRBY', KEYS[1], 'depth', -1)
  if id ~= '' then redis.call('HDEL', KEYS[9], id) end
  return r
end
local depth = room + redis.call('LLEN', KEYS[5])
if depth >= bound then return refuse({'full', depth, bound, 0}) end
if tbound > 0 then
  local tdepth = redis.call('LLEN', KEYS[4]) + tonumber(redis.call('HGET', KEYS[11], tenant) or '0')
  if tdepth >= tbound then return refuse({'tenant_full', tdepth, tbound, 0}) end
end
local d = {1, 0, 0, 0}
local due, now, pad = tonumber(ARGV[15]), nil, nil
if ARGV[5] ~= '' or due > 0 then now, pad = clock(ARGV[14]) end
if ARGV[5] ~= '' then
  d = admit(KEYS[6], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9],
    tonumber(ARGV[4]), true, now, pad)
  if d[1] == 0 then return refuse({'limited', d[2], d[3], d[4]}) end
end
if due > 0 and due > now then
  redis.call('ZADD', KEYS[10], int(due), tenant .. ' ' .. ARGV[2])
  redis.call('HINCRBY', KEYS[11], tenant, 1)
elseif redis.call('RPUSH', KEYS[4], ARGV[2]) == 1 and redis.call('SADD', KEYS[3], tenant) == 1 then
  -- A tenant whose list held jobs already is in the ring or asleep (a
  -- tenant leaves both only when a claim finds its list empty).
  redis.call('RPUSH', KEYS[2], tenant)
end
-- The default weight (1) is not stored and the default class not counted
-- (its count is the depth less the others', queue.Producer.Stats), which
-- saves a command on most jobs.
if ARGV[11] ~= '1' then redis.call('HSET', KEYS[7], tenant, ARGV[11]) end
if ARGV[12] ~= 'default' then redis.call('HINCRBY', KEYS[8], ARGV[12], 1) end
-- Where the inspector finds the job: its task id (less the scoped id,
-- which is the field's name), its place in its
-- tenant's sequence of enqueues (its distance from the head's is about
-- how many jobs wait before it) and when it is due.
local seq = redis.call('HINCRBY', KEYS[14], tenant, 1)
redis.call('HSET', KEYS[14], ARGV[19], ARGV[18] .. ' ' .. seq .. ' ' .. int(math.max(due, 0)))
return {'queued', depth + 1, d[2], d[3]}
