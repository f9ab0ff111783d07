-- Take a tenant's oldest job out of the waiting room and hand it to asynq
-- (queue_handover.lua), if it is still the job the dispatcher claimed.
-- KEYS     1 the tenant's list, 2 meta hash, 3 per-class count of waiting
--          jobs, 4 ids hash, 5 asynq's pending list
-- ARGV     1 the claimed envelope, 2 now in µs or "" for TIME, 3 asynq's
--          task key prefix, 4 the queue's name, 5 asynq's Retention (s)
-- Uses     prelude.lua (int, clock), queue_handover.lua
-- Returns  1 taken, 0 the head changed (another dispatcher took it)
local H = {meta = KEYS[2], cdepth = KEYS[3], ids = KEYS[4], pending = KEYS[5],
  taskprefix = ARGV[3], queue = ARGV[4], retention = tonumber(ARGV[5])}
local now = clock(ARGV[2])
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[1] then return 0 end
redis.call('LPOP', KEYS[1])
hand_over(H, ARGV[1], now)
flush(H)
return 1
