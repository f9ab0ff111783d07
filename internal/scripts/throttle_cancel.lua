-- Give back a reservation that will not be used, if no later reservation
-- was made since: move the TAT back by its n units. A reservation followed
-- by others cannot be undone without moving theirs, so it is kept. The TAT
-- never moves back into a pause: not before where throttle_pause.lua put
-- it (the pause's end plus burst-1 intervals), so that a slot booked next
-- is never inside the pause.
-- KEYS[1]  the bucket's hash (see throttle_reserve.lua)
-- ARGV     1 rl, 2 pr, 3 cost n, 4 a and 5 f as the reservation returned
--          them, 6 burst
-- Uses     prelude.lua (int)
-- Returns  1 if given back, 0 if not
local key = KEYS[1]
local rl, pr, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local st = redis.call('HMGET', key, 'a', 'f', 'p')
if st[1] ~= ARGV[4] or st[2] ~= ARGV[5] then return 0 end
local a, f = tonumber(ARGV[4]), tonumber(ARGV[5])
local back = n * pr
local k = math.ceil((back - f) / rl) -- whole µs to borrow
if k < 0 then k = 0 end
a = a - k
f = f + k * rl - back
if st[3] then
  local lead = (tonumber(ARGV[6] or '1') - 1) * pr
  local pa, pf = tonumber(st[3]) + math.floor(lead / rl), lead % rl
  if a < pa or (a == pa and f < pf) then a, f = pa, pf end
end
redis.call('HSET', key, 'a', int(a), 'f', int(f))
return 1
