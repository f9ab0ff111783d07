-- Pause a pacing bucket: no slot starts before now + d. The TAT moves to
-- the pause's end plus burst-1 intervals, so that calls resume one
-- interval apart instead of all at once; a pause never shortens one
-- already set. With slow set (a refusal: 429 or 503, or an API that says
-- its budget is nearly spent) the bucket's adaptive share also steps
-- down, at most once per d: the ceiling to 98% of the share now and the
-- share to 95% of it (never below SHARE_MIN), from where both climb back
-- (prelude.lua, share).
-- KEYS[1]  the bucket's hash (see throttle_reserve.lua)
-- ARGV     1 rl, 2 pr, 3 burst, 4 d (µs), 5 now in µs or "" for TIME,
--          6 "1" to slow down
-- Uses     prelude.lua (int, clock, share, paced)
-- Returns  {the pause still to run (µs), its end (µs, on the script's clock:
--          TIME or ARGV 5), the share now (basis points), 1 if this call
--          stepped it down}
local key = KEYS[1]
local rl, pr, burst, d = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now, pad = clock(ARGV[5])
local stop = now + d
local st = redis.call('HMGET', key, 'a', 'f', 'p', 's', 'c', 't')
local p = tonumber(st[3] or '0')
if stop > p then
  p = stop
  redis.call('HSET', key, 'p', int(p))
end
local sh, ceil = share(st[4], st[5], st[6], now)
local stepped = 0
if ARGV[6] == '1' and (not st[6] or now - tonumber(st[6]) >= d) then
  ceil = math.max(SHARE_MIN, math.floor(sh * 0.98))
  sh = math.max(SHARE_MIN, math.floor(sh * 0.95))
  redis.call('HSET', key, 's', sh, 'c', ceil, 't', int(now))
  stepped = 1
end
pr = paced(pr, sh)
local lead = (burst - 1) * pr
local a, f = p + math.floor(lead / rl), lead % rl
local ca, cf = tonumber(st[1] or '0'), tonumber(st[2] or '0')
if ca < a or (ca == a and cf < f) then
  redis.call('HSET', key, 'a', int(a), 'f', int(f))
  ca, cf = a, f
end
local life = ca - now
if ceil < SHARE_FULL then life = math.max(life, (SHARE_FULL - ceil) / SHARE_CREEP) end
redis.call('PEXPIRE', key, math.ceil(life / 1000) + 1 + pad)
return {p - now, p, sh, stepped}
