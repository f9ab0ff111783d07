-- Take a tenant out of the ring until a time: its throttle is paused or
-- its next slot is too far away. It costs nothing until it wakes, when
-- queue_claim.lua puts it back.
-- KEYS     1 ring, 2 sleeping tenants, 3 why each sleeps (hash: tenant
--          -> tenant id TAB reason, for Stats)
-- ARGV     1 tenant (encoded), 2 sleep (µs), 3 now in µs or "" for TIME,
--          4 the tenant's id and the reason
-- Uses     prelude.lua (int, clock)
-- Returns  1 asleep, 0 not in the ring (taken by another dispatcher)
local now = clock(ARGV[3])
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], int(now + tonumber(ARGV[2])), ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
return 1
