-- Write the asynq tasks of entries taken for the hand-over
-- (queue_handover.lua) and clear them from the handing set, in one step:
-- each task as asynq's Client.Enqueue writes one, the hash
-- asynq:{Q}:t:<task id> with msg (asynq's TaskMessage, built by the
-- dispatcher: queue.taskMessage), state "pending" and pending_since
-- (ns), and its id pushed on the pending list, in order (asynq dequeues
-- from the other end). The message is stored as given: no script reads
-- it. An entry no longer in the handing set (another dispatcher handed it
-- over) is skipped, and a task id asynq holds already is not written
-- again, so a hand-over is done once. The entries leave the waiting
-- room's depth and class counts.
-- KEYS     1 handing set, 2 meta hash, 3 per-class count of waiting jobs
--          (the default class is not counted), 4 asynq's pending list
-- ARGV     1 asynq's task key prefix (asynq:{Q}:t:), 2 now in µs or ""
--          for the server's TIME, then in fours: the entry, its metrics
--          class, its task id, its asynq TaskMessage
-- Uses     prelude.lua (int, clock)
-- Returns  how many entries it handed over
local now = clock(ARGV[2])
local since = int(now) .. '000'
local n, classes, push = 0, {}, {}
for i = 3, #ARGV, 4 do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    n = n + 1
    classes[ARGV[i + 1]] = (classes[ARGV[i + 1]] or 0) + 1
    local key = ARGV[1] .. ARGV[i + 2]
    if redis.call('EXISTS', key) == 0 then
      redis.call('HSET', key, 'msg', ARGV[i + 3], 'state', 'pending', 'pending_since', since)
      push[#push + 1] = ARGV[i + 2]
    end
  end
end
if #push > 0 then redis.call('LPUSH', KEYS[4], unpack(push)) end
if n > 0 then redis.call('HINCRBY', KEYS[2], 'depth', -n) end
for class, c in pairs(classes) do
  if class ~= 'default' and redis.call('HINCRBY', KEYS[3], class, -c) <= 0 then
    redis.call('HDEL', KEYS[3], class)
  end
end
return n
