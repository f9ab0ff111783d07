-- Take the text at the head of a tenant's list that is no entry (a claim
-- showed it: queue_claim.lua) for the hand-over, as the entry given in
-- its place, if it is still the text the dispatcher claimed
-- (queue_handover.lua).
-- KEYS     1 the tenant's list, 2 handing set
-- ARGV     1 the claimed text, 2 now in µs or "" for TIME, 3 the entry to
--          hand over in its place
-- Uses     prelude.lua (int, clock), queue_handover.lua
-- Returns  1 taken, 0 the head changed (another dispatcher took it) or
--          what would be handed over is no entry
local now = clock(ARGV[2])
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[1] then return 0 end
if not read(ARGV[3]) then return 0 end
redis.call('LPOP', KEYS[1])
redis.call('ZADD', KEYS[2], int(now), ARGV[3])
return 1
