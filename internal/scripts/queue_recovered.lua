-- Mark a dead process's jobs recovered once they are back in the waiting
-- room (queue_recover.lua): their asynq task ids go in the recovered set,
-- so that asynq's own later recovery of the same task completes it
-- without running it (queue.Server.process), and leave the run hash.
-- Marks older than the keep time are dropped.
-- KEYS     1 the dead process's run hash, 2 recovered (sorted set: asynq
--          task id -> when it was recovered, µs)
-- ARGV     1 keep (µs), then the task ids
-- Uses     prelude.lua (int, clock)
-- Returns  the number of task ids marked
local now = clock('')
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[2], int(now), ARGV[i])
  redis.call('HDEL', KEYS[1], ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. int(now - tonumber(ARGV[1])))
return #ARGV - 1
