-- Move the handed-over jobs that the version before the handover list
-- recorded (a sorted set in hand-over order and a hash of "<task id>
-- <tenant> <id> <class>" by job key) into the handover list, ahead of any
-- entry there (theirs are older), so that they are counted out of the
-- depth once asynq gives them to a worker. That version counted them in
-- their class and kept per-tenant counts; this one counts only jobs in the
-- waiting room by class, and a tenant's backlog is the length of its list:
-- the classes lose them, and the per-tenant counts go.
-- KEYS     1 the old sorted set, 2 the old hash, 3 the old per-tenant
--          counts, 4 the handover list, 5 per-class count of waiting jobs
-- Returns  how many entries moved
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
local moved = 0
-- Newest first: each goes to the head.
for i = #members, 1, -1 do
  local info = redis.call('HGET', KEYS[2], members[i])
  local _, _, task, _, id, class = string.find(info or '', '^(%S+) (%S+) (%S+) (.*)$')
  if task then
    redis.call('LPUSH', KEYS[4], task .. ' ' .. id)
    if redis.call('HINCRBY', KEYS[5], class, -1) <= 0 then redis.call('HDEL', KEYS[5], class) end
    moved = moved + 1
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return moved
