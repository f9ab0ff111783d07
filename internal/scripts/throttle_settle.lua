-- Settle a reservation once the call's real cost is known: move each
-- bucket's TAT by (actual - estimate) of its count, in one step. A call
-- that used less gives back what it did not use; one that used more books
-- the overrun as debt, which the calls booked after it wait for. Unlike a
-- cancel it applies whatever was booked since: the TAT is the sum of what
-- the bucket holds, and the calls already booked keep their slots.
--
-- A refund never moves a TAT below now (a drained bucket holds nothing to
-- give back, so a refund cannot make more burst than the bucket allows)
-- nor back into a pause (not before where throttle_pause.lua put it: the
-- pause's end plus burst-1 intervals). A debt that leaves a bucket of
-- burst > 1 within G of full marks it guarded, as a booking would
-- (throttle_reserve.lua). A bucket that counts calls is not sent.
--
-- KEYS[1]  the bucket's hash (see throttle_reserve.lua)
-- ARGV     1 now in µs or "" for the server's TIME (tests only), 2 the
--          guard G (µs); then for each bucket to settle in fives: its
--          index (0 for the Limit's own, i for Also's i-th), rl, the pr
--          the reservation was paced at, burst, and the difference
--          real - booked (not 0)
-- Uses     prelude.lua (int, clock, guard_of)
-- Returns  the furthest TAT after settling, in µs from now (0: every
--          bucket settled is empty, or none was sent)
local key = KEYS[1]
local now, pad = clock(ARGV[1])
local guard = tonumber(ARGV[2])
if #ARGV < 3 then return 0 end
local fields = {'p', 'e'}
local b = {}
for i = 3, #ARGV, 5 do
  local k = ARGV[i]
  local x = {rl = tonumber(ARGV[i + 1]), pr = tonumber(ARGV[i + 2]), burst = tonumber(ARGV[i + 3]),
             d = tonumber(ARGV[i + 4]), fa = 'a', ff = 'f', fg = 'g'}
  if k ~= '0' then x.fa, x.ff, x.fg = 'a' .. k, 'f' .. k, 'g' .. k end
  b[#b + 1] = x
  fields[#fields + 1], fields[#fields + 2] = x.fa, x.ff
end
local st = redis.call('HMGET', key, unpack(fields))
local set = {}
local far = 0
for i, x in ipairs(b) do
  local a, f = now, 0
  if st[1 + 2 * i] then a, f = tonumber(st[1 + 2 * i]), tonumber(st[2 + 2 * i]) end
  -- a drained bucket is empty: what lies behind now is no credit
  if a < now then a, f = now, 0 end
  local oa, of = a, f
  local tot = f + x.d * x.pr
  local q = math.floor(tot / x.rl)
  a, f = a + q, tot - q * x.rl
  if x.d < 0 then
    -- the floor: now, or the pause's end plus burst-1 intervals; never
    -- above where the TAT was
    local fa, ff = now, 0
    if st[1] then
      local lead = (x.burst - 1) * x.pr
      local pa, pf = tonumber(st[1]) + math.floor(lead / x.rl), lead % x.rl
      if pa > fa or (pa == fa and pf > ff) then fa, ff = pa, pf end
    end
    if fa > oa or (fa == oa and ff > of) then fa, ff = oa, of end
    if a < fa or (a == fa and f < ff) then a, f = fa, ff end
  end
  if a ~= oa or f ~= of then
    set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = x.fa, int(a), x.ff, int(f)
    if x.d > 0 and x.burst > 1 then
      local g = guard_of(guard, x.rl, x.pr, x.burst)
      if g > 0 and (a - now) * x.rl + f > x.burst * x.pr - g then
        set[#set + 1], set[#set + 2] = x.fg, '1'
      end
    end
  end
  local l = a - now
  if f > 0 then l = l + 1 end
  if l > far then far = l end
end
if #set == 0 then return far end
-- A debt may reach past the key's TTL: renew it as a booking does.
if not st[2] or tonumber(st[2]) < now + far then
  local life = math.ceil(far * 1.5)
  set[#set + 1], set[#set + 2] = 'e', int(now + life)
  redis.call('HSET', key, unpack(set))
  local ms = math.ceil(life / 1000) + 1 + pad
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
else
  redis.call('HSET', key, unpack(set))
end
return far
