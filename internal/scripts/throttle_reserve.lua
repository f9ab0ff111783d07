-- Reserve the next slot of a shared pacing bucket: GCRA as a queue. The
-- theoretical arrival time TAT = a + f/rl µs (0 <= f < rl) is when the
-- bucket would next be empty; one unit's emission interval is pr/rl µs.
-- A call of n units may start at max(now, TAT + n*T - burst*T), so with
-- burst 1 every call gets its own slot, evenly spaced. After a slow-down
-- (throttle_pause.lua) the interval is longer: pr is scaled by the
-- bucket's adaptive share (prelude.lua, share and paced).
-- KEYS[1]  the bucket's hash: a, f as above; p = paused until (µs); s, c,
--          t = the share, its ceiling (basis points) and the time (µs)
--          of the last slow-down
-- ARGV     1 rl, 2 pr (the rate in lowest terms: rl units per pr µs),
--          3 burst, 4 cost n, 5 max wait (µs), 6 "1" to reserve, "0" to
--          peek, 7 now in µs or "" for the server's TIME (tests only)
-- Uses     prelude.lua (int, clock, share, paced)
-- Returns  {taken (1/0), delay until the slot (µs), retry after (µs) when
--          not taken, paused for (µs), a and f after the reservation (for
--          cancelling it), the pr it was paced at, the share (basis
--          points)}
local key = KEYS[1]
local rl, pr, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n, maxwait, reserve = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
local now, pad = clock(ARGV[7])

local at, frac, paused = now, 0, 0
local st = redis.call('HMGET', key, 'a', 'f', 'p', 's', 'c', 't')
if st[1] then
  local a = tonumber(st[1])
  if a >= now then at, frac = a, tonumber(st[2]) end
end
if st[3] then
  local p = tonumber(st[3])
  if p > now then paused = p - now end
end
local sh, ceil = share(st[4], st[5], st[6], now)
pr = paced(pr, sh)
local level = (at - now) * rl + frac + n * pr -- the new TAT - now, in 1/rl µs
local early = level - burst * pr
local delay = 0
if early > 0 then delay = math.ceil(early / rl) end
if delay > maxwait then
  return {0, delay, delay - maxwait, paused, 0, 0, pr, sh}
end
if not reserve then
  return {1, delay, 0, paused, 0, 0, pr, sh}
end
local f = frac + n * pr
at = at + math.floor(f / rl)
frac = f % rl
redis.call('HSET', key, 'a', int(at), 'f', int(frac))
local life = math.ceil(level / rl)
if paused > life then life = paused end
-- What was learned lives until the ceiling is back at the whole rate.
if ceil < SHARE_FULL then life = math.max(life, (SHARE_FULL - ceil) / SHARE_CREEP) end
redis.call('PEXPIRE', key, math.ceil(life / 1000) + 1 + pad)
return {1, delay, 0, paused, at, frac, pr, sh}
