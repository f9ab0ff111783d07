-- A worker process's heartbeat, with the jobs it runs (queue.Server's
-- inflight; docs/reliability.md, A worker killed mid-job): the process's
-- beat is now, the jobs that started since the last beat are added to its
-- run hash and those that ended are taken out; and the processes whose
-- last beat is older than the dead-after time are named, for the caller
-- to recover their jobs (queue_recover.lua).
-- KEYS     1 procs (sorted set: process id -> last beat, µs), 2 the
--          process's run hash (asynq task id -> its run: the retry count,
--          a newline and the task's payload, queue.Job's envelope)
-- ARGV     1 the process id, 2 dead after (µs), 3 how long the run hash
--          outlives the last beat (ms), 4 n, the number of task ids to
--          take out, then those n ids, then pairs of task id and run to
--          add
-- Uses     prelude.lua (int, clock)
-- Returns  the ids of up to 16 other processes whose last beat is older
--          than dead after
local now = clock('')
redis.call('ZADD', KEYS[1], int(now), ARGV[1])
local n = tonumber(ARGV[4])
if n > 0 then redis.call('HDEL', KEYS[2], unpack(ARGV, 5, 4 + n)) end
if #ARGV > 4 + n then redis.call('HSET', KEYS[2], unpack(ARGV, 5 + n)) end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. int(now - tonumber(ARGV[2])), 'LIMIT', 0, 16)
local out = {}
for _, id in ipairs(dead) do
  if id ~= ARGV[1] then out[#out + 1] = id end
end
return out
