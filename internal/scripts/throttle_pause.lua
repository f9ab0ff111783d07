-- Pause a pacing bucket: no slot starts before now + d. The TAT moves to
-- the pause's end plus burst-1 intervals, so that calls resume one
-- interval apart instead of all at once; a pause never shortens one
-- already set.
-- KEYS[1]  the bucket's hash (see throttle_reserve.lua)
-- ARGV     1 rl, 2 pr, 3 burst, 4 d (µs), 5 now in µs or "" for TIME
-- Uses     prelude.lua (int, clock)
-- Returns  {the pause still to run (µs), its end (µs, on the script's clock:
--          TIME or ARGV 5)}
local key = KEYS[1]
local rl, pr, burst, d = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now, pad = clock(ARGV[5])
local stop = now + d
local st = redis.call('HMGET', key, 'a', 'f', 'p')
local p = tonumber(st[3] or '0')
if stop > p then
  p = stop
  redis.call('HSET', key, 'p', int(p))
end
local lead = (burst - 1) * pr
local a, f = p + math.floor(lead / rl), lead % rl
local ca, cf = tonumber(st[1] or '0'), tonumber(st[2] or '0')
if ca < a or (ca == a and cf < f) then
  redis.call('HSET', key, 'a', int(a), 'f', int(f))
  ca, cf = a, f
end
redis.call('PEXPIRE', key, math.ceil((ca - now) / 1000) + 1 + pad)
return {p - now, p}
