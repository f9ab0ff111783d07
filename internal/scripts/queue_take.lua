-- Take a tenant's oldest job out of the waiting room and hand it to asynq
-- (queue_handover.lua), if it is still the job the dispatcher claimed.
-- KEYS     1 the tenant's list, 2 meta hash, 3 per-class count of waiting
--          jobs, 4 ids hash, 5 asynq's pending list, 6 held ids
-- ARGV     1 the claimed entry, 2 now in µs or "" for TIME, 3 asynq's
--          task key prefix, 4 asynq's TaskMessage field Retention,
--          encoded ("" for none), 5 how long an id stays held at most
--          (µs), 6 (optional) the entry to hand over in its place, when
--          the claimed text is no entry
-- Uses     prelude.lua (int, clock), queue_handover.lua
-- Returns  1 taken, 0 the head changed (another dispatcher took it) or
--          what would be handed over is no entry
local H = {meta = KEYS[2], cdepth = KEYS[3], ids = KEYS[4], pending = KEYS[5],
  held = KEYS[6], taskprefix = ARGV[3], retention = ARGV[4], hold = tonumber(ARGV[5])}
local now = clock(ARGV[2])
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[1] then return 0 end
local task, class, msg = read(ARGV[6] or ARGV[1])
if not task then return 0 end
redis.call('LPOP', KEYS[1])
hand_over(H, task, class, msg, now)
flush(H)
return 1
