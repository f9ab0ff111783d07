-- Count out of the depth the handed-over jobs that asynq has given to a
-- worker (queue_count.lua's reconcile), so that counts read next are
-- exact. The dispatcher's claims do this as they go; stats and tests call
-- this script.
-- KEYS     1 handed-over jobs, 2 their hinfo, 3 meta hash, 4 per-tenant
--          depth hash, 5 per-class depth hash, 6 ids hash
-- ARGV     1 asynq's task key prefix
-- Uses     queue_count.lua
-- Returns  how many jobs were counted out
local H = {handed = KEYS[1], hinfo = KEYS[2], meta = KEYS[3], tdepth = KEYS[4], cdepth = KEYS[5],
  ids = KEYS[6], taskprefix = ARGV[1]}
return reconcile(H, 100000)
