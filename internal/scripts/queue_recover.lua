-- Take a dead process's jobs to recover them (queue.Server's inflight):
-- the process leaves procs, so that no other worker recovers it too, and
-- its runs are returned; they stay in its run hash until the caller has
-- put them back in the waiting room (queue_recovered.lua), so that a
-- caller that dies meanwhile leaves them to asynq's own recovery.
-- KEYS     1 procs (see queue_alive.lua), 2 the dead process's run hash
-- ARGV     1 the dead process's id, 2 dead after (µs)
-- Uses     prelude.lua (int, clock)
-- Returns  false when the process is not dead (it beat again, or another
--          worker took it), else its run hash as task id, run, ...
local now = clock('')
local beat = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not beat or tonumber(beat) >= now - tonumber(ARGV[2]) then return false end
redis.call('ZREM', KEYS[1], ARGV[1])
return redis.call('HGETALL', KEYS[2])
