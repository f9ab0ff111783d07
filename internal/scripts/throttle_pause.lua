-- Pause a pacing bucket: no slot starts before now + d. The TAT moves to
-- the pause's end plus burst-1 intervals, so that calls resume one
-- interval apart instead of all at once; a pause never shortens one
-- already set. With slow set (a refusal: 429 or 503, or an API that says
-- its budget is nearly spent) the bucket's adaptive share also steps
-- down, at most once per d: the ceiling to 98% of the share now and the
-- share to 95% of it (never below SHARE_MIN, 75%: a caller that is always
-- refused cannot drag the pace further), from where both climb back
-- (prelude.lua, share). Further buckets (throttle.Limit.Also) move the
-- same way, each by its own burst and interval.
-- KEYS[1]  the bucket's hash (see throttle_reserve.lua)
-- ARGV     1 rl, 2 pr, 3 burst, 4 d (µs), 5 now in µs or "" for TIME,
--          6 "1" to slow down; then for each further bucket in threes:
--          rl, pr, burst
-- Uses     prelude.lua (int, clock, share, paced)
-- Returns  {the pause still to run (µs), its end (µs, on the script's clock:
--          TIME or ARGV 5), the share now (basis points), 1 if this call
--          stepped it down}
local key = KEYS[1]
local d = tonumber(ARGV[4])
local now, pad = clock(ARGV[5])
local b = {{rl = tonumber(ARGV[1]), pr = tonumber(ARGV[2]), burst = tonumber(ARGV[3]), fa = 'a', ff = 'f'}}
for i = 7, #ARGV, 3 do
  local k = #b
  b[k + 1] = {rl = tonumber(ARGV[i]), pr = tonumber(ARGV[i + 1]), burst = tonumber(ARGV[i + 2]),
              fa = 'a' .. k, ff = 'f' .. k}
end
local fields = {'p', 's', 'c', 't'}
for _, x in ipairs(b) do
  fields[#fields + 1] = x.fa
  fields[#fields + 1] = x.ff
end
local stop = now + d
local st = redis.call('HMGET', key, unpack(fields))
local p = tonumber(st[1] or '0')
if stop > p then
  p = stop
  redis.call('HSET', key, 'p', int(p))
end
local sh, ceil = share(st[2], st[3], st[4], now)
local stepped = 0
if ARGV[6] == '1' and (not st[4] or now - tonumber(st[4]) >= d) then
  ceil = math.max(SHARE_MIN, math.floor(sh * 0.98))
  sh = math.max(SHARE_MIN, math.floor(sh * 0.95))
  redis.call('HSET', key, 's', sh, 'c', ceil, 't', int(now))
  stepped = 1
end
local life = 0
for i, x in ipairs(b) do
  local pr = paced(x.pr, sh)
  local lead = (x.burst - 1) * pr
  local a, f = p + math.floor(lead / x.rl), lead % x.rl
  local ca, cf = tonumber(st[3 + 2 * i] or '0'), tonumber(st[4 + 2 * i] or '0')
  if ca < a or (ca == a and cf < f) then
    redis.call('HSET', key, x.fa, int(a), x.ff, int(f))
    ca, cf = a, f
  end
  if i == 1 or ca - now > life then life = ca - now end
end
if ceil < SHARE_FULL then life = math.max(life, (SHARE_FULL - ceil) / SHARE_CREEP) end
redis.call('PEXPIRE', key, math.ceil(life / 1000) + 1 + pad)
-- The TTL may be shorter now than the one throttle_reserve.lua last set:
-- its next booking sets it again.
redis.call('HDEL', key, 'e')
return {p - now, p, sh, stepped}
