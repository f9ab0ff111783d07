-- Move the handed-over jobs that the version before the handover list
-- recorded (a sorted set in hand-over order and a hash of "<task id>
-- <tenant> <id> <class>" by job key) into the handover list, ahead of any
-- entry there (theirs are older), and delete the old keys, so that they
-- are counted out of the depth once asynq gives them to a worker.
-- KEYS     1 the old sorted set, 2 the old hash, 3 the handover list
-- Returns  how many entries moved
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
local moved = 0
-- Newest first: each goes to the head.
for i = #members, 1, -1 do
  local info = redis.call('HGET', KEYS[2], members[i])
  local _, _, task, enc, id, class = string.find(info or '', '^(%S+) (%S+) (%S+) (.*)$')
  if task then
    redis.call('LPUSH', KEYS[3], enc .. ' ' .. task .. ' ' .. id .. ' ' .. class)
    moved = moved + 1
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
return moved
