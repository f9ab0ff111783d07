-- Bring the handed-over jobs that earlier versions recorded into this
-- version's counts. Those versions kept a handed-over job in the depth and
-- its id in the ids hash until asynq gave it to a worker, recording it in
-- a sorted set and a hash of "<task id> <tenant> <id> <class>" by job key
-- (which also counted it in its class, and per tenant), and later in the
-- handover list as "<task id> <id>". This version counts only jobs in the
-- waiting room; a handed-over job is in asynq's pending list, which the
-- bound reads as it is. So each recorded job leaves the depth, its id and,
-- for the sorted-set version, its class; the records and the per-tenant
-- counts go, and so does the default class's count.
-- KEYS     1 the old sorted set, 2 the old hash, 3 the old per-tenant
--          counts, 4 the handover list, 5 per-class count of waiting jobs,
--          6 meta hash, 7 ids hash
-- Returns  how many jobs left the counts
local moved = 0
local function out(id)
  if redis.call('HINCRBY', KEYS[7], id, -1) <= 0 then redis.call('HDEL', KEYS[7], id) end
  moved = moved + 1
end
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local info = redis.call('HGET', KEYS[2], member)
  local _, _, _, _, id, class = string.find(info or '', '^(%S+) (%S+) (%S+) (.*)$')
  if id then
    if redis.call('HINCRBY', KEYS[5], class, -1) <= 0 then redis.call('HDEL', KEYS[5], class) end
    out(id)
  end
end
for _, entry in ipairs(redis.call('LRANGE', KEYS[4], 0, -1)) do
  local _, _, _, id = string.find(entry, '^(%S+) (%S+)$')
  if id then out(id) end
end
if moved > 0 and redis.call('HINCRBY', KEYS[6], 'depth', -moved) < 0 then
  redis.call('HSET', KEYS[6], 'depth', 0)
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
-- Earlier versions also counted the default class, which this one
-- derives from the depth (queue_enqueue.lua); readers ignore the field,
-- and it goes here.
redis.call('HDEL', KEYS[5], 'default')
return moved
