-- Count out of the depth the handed-over jobs that asynq has given to a
-- worker (queue_count.lua's reconcile), so that counts read next are
-- exact. The dispatcher's claims do this as they go; stats and tests call
-- this script.
-- KEYS     1 handed-over jobs' entries, 2 meta hash, 3 ids hash
-- ARGV     1 asynq's task key prefix
-- Uses     queue_count.lua
-- Returns  how many jobs were counted out
local H = {handover = KEYS[1], meta = KEYS[2], ids = KEYS[3], taskprefix = ARGV[1]}
return reconcile(H, 100000)
