-- Put a job back at the head of its tenant's list: its handler was
-- throttled before it started, or it ran and must run again later without
-- spending a retry (a 429). It is in the waiting room again: in the depth,
-- its tenant's backlog, its class's count, and its id is refused again
-- (another job of that id enqueued meanwhile keeps its own count): a job
-- put back before it started ends its id's hold (queue_handover.lua) in
-- this same step, so that the id is never free in between.
-- Optionally the tenant sleeps until a time, and the job's throttle key
-- is marked full until then, so that claims hand over no job of that key
-- meanwhile (queue_claim.lua).
-- KEYS     1 the tenant's list, 2 ring, 3 set of tenants in the ring or
--          asleep, 4 sleeping tenants, 5 meta hash, 6 per-class count of
--          waiting jobs (the default class is not counted), 7 ids hash,
--          8 why each tenant sleeps (hash: tenant -> tenant id TAB
--          reason, for Stats), 9 full set (throttle key -> until, µs),
--          10 held ids, 11 jobs hash (the Inspector's records: see
--          queue_record.lua)
-- ARGV     1 the job's entry to put back (queue.Job.item), 2 tenant
--          (encoded), 3 sleep (µs, 0: none), 4 now in µs or "" for TIME,
--          5 the job's metrics class, 6 scoped job id
--          (queue.Job.ScopedID; "" for an id the queue chose, which is
--          not recorded), 7 the tenant's id and why it sleeps, 8
--          the throttle key to mark full for the sleep ("": none), 9
--          "1" when a tenant asleep already keeps the sooner of its two
--          wake times (else the later), 10 the scoped id whose hold
--          ends ("": the job holds none), 11 the job's scoped id, under
--          which its record is kept, 12 its new hand-over
--          (<nonce>:<moves>): a record of the same job (the same nonce)
--          takes it, keeping its sequence and due time, as
--          queue_record.lua's "retask" does
-- Uses     prelude.lua (int, clock)
-- Returns  1
local now = clock(ARGV[4])
redis.call('HINCRBY', KEYS[5], 'depth', 1)
if ARGV[6] ~= '' then redis.call('HINCRBY', KEYS[7], ARGV[6], 1) end
if ARGV[10] ~= '' then redis.call('ZREM', KEYS[10], ARGV[10]) end
if ARGV[5] ~= 'default' then redis.call('HINCRBY', KEYS[6], ARGV[5], 1) end
redis.call('LPUSH', KEYS[1], ARGV[1])
local rec = redis.call('HGET', KEYS[11], ARGV[11])
if rec then
  local sp = string.find(rec, ' ', 1, true)
  local function nonce(hand) return string.match(hand, '^([^:]*):') end
  if sp and nonce(string.sub(rec, 1, sp - 1)) == nonce(ARGV[12]) then
    redis.call('HSET', KEYS[11], ARGV[11], ARGV[12] .. string.sub(rec, sp))
  end
end
local sleep = tonumber(ARGV[3])
if sleep > 0 then redis.call('HSET', KEYS[8], ARGV[2], ARGV[7]) end
if sleep > 0 and ARGV[8] ~= '' then
  redis.call('ZADD', KEYS[9], 'GT', int(now + sleep), ARGV[8])
end
if redis.call('SADD', KEYS[3], ARGV[2]) == 1 then
  if sleep > 0 then
    redis.call('ZADD', KEYS[4], int(now + sleep), ARGV[2])
  else
    redis.call('RPUSH', KEYS[2], ARGV[2])
  end
elseif sleep > 0 then
  -- In the ring already: move it to the sleepers (it is near the tail,
  -- where LREM with a negative count starts).
  if redis.call('LREM', KEYS[2], -1, ARGV[2]) == 1 then
    redis.call('ZADD', KEYS[4], int(now + sleep), ARGV[2])
  else
    local keep = 'GT'
    if ARGV[9] == '1' then keep = 'LT' end
    redis.call('ZADD', KEYS[4], keep, int(now + sleep), ARGV[2])
  end
end
return 1
