-- Reserve the next slot of a shared pacing bucket: GCRA as a queue. The
-- theoretical arrival time TAT = a + f/rl µs (0 <= f < rl) is when the
-- bucket would next be empty; one unit's emission interval is pr/rl µs.
-- A call of n units may start at max(now, TAT + n*T - burst*T), so with
-- burst 1 every call gets its own slot, evenly spaced. After a slow-down
-- (throttle_pause.lua) the interval is longer: pr is scaled by the
-- bucket's adaptive share (prelude.lua, share and paced).
--
-- The guard (throttle.Limit.Guard): in a bucket of burst > 1, a call that
-- must wait for room, or that comes while the bucket is guarded, starts
-- G later than the rule above says (G the guard, capped at half the
-- bucket, burst*T/2):
-- its tolerance is burst*T - G. A booking that is guarded, or that leaves
-- the bucket within G of full (TAT - slot > burst*T - G), marks it
-- guarded; the mark is kept while the bucket holds anything and for G
-- after it empties, then dropped. So burst units still start at once
-- after an idle spell, the pace is unchanged, and calls paced after a
-- burst leave the API's bucket G of room for the burst having reached it
-- later than they do (docs/throttle.md, Burst and the guard).
--
-- A key may have further buckets (throttle.Limit.Also), in the same hash:
-- bucket i keeps its TAT in the fields a<i>, f<i>. The call's slot is
-- then the latest of the slots each bucket would give its count, and
-- every bucket is booked at it: TAT' = max(TAT, slot) + n*T. A bucket
-- whose own slot rounds up to the call's books max(TAT, now) + n*T
-- instead, as a key of one bucket does, so that rounding to whole µs
-- never drifts its pace.
-- KEYS[1]  the bucket's hash: a, f as above; g = "1" while guarded (only
--          for a burst > 1); p = paused until (µs); s, c, t = the share,
--          its ceiling (basis points) and the time (µs) of the last
--          slow-down; e = the time (µs) the key's TTL reaches, as this
--          script last set it; a1, f1, g1, a2, f2, g2, ... the further
--          buckets
-- The TTL is set half as long again as the booking needs, so that a busy
-- key renews it once its bookings outgrow that, not with every call.
-- ARGV     1 rl, 2 pr (the rate in lowest terms: rl units per pr µs),
--          3 burst, 4 cost n, 5 max wait (µs), 6 "1" to reserve, "0" to
--          peek, 7 now in µs or "" for the server's TIME (tests only),
--          8 the guard G (µs); then for each further bucket in fours:
--          rl, pr, burst, its count (n or 1)
-- Uses     prelude.lua (clock, int), throttle_book.lua (due, book, renew,
--          paused_for, reserve_one)
-- Returns  {taken (1/0), delay until the slot (µs), retry after (µs) when
--          not taken, paused for (µs), a and f after the reservation (for
--          cancelling it), the pr it was paced at, the share (basis
--          points) and its ceiling (hundredths of a basis point: it creeps
--          by fractions of one), the slot (µs)}; then for each further
--          bucket its a and f after the reservation (0 and 0 when none
--          was made) and the pr it was paced at
local key = KEYS[1]
local maxwait, reserve = tonumber(ARGV[5]), ARGV[6] == '1'
local now, pad = clock(ARGV[7])
local guard = tonumber(ARGV[8])

-- One bucket, the common case.
if #ARGV == 8 then
  return reserve_one(key, tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), guard, maxwait, reserve, now, pad)
end

local b = {{rl = tonumber(ARGV[1]), pr = tonumber(ARGV[2]), burst = tonumber(ARGV[3]),
            n = tonumber(ARGV[4]), fa = 'a', ff = 'f', fg = 'g'}}
for i = 9, #ARGV, 4 do
  local k = #b
  b[k + 1] = {rl = tonumber(ARGV[i]), pr = tonumber(ARGV[i + 1]), burst = tonumber(ARGV[i + 2]),
              n = tonumber(ARGV[i + 3]), fa = 'a' .. k, ff = 'f' .. k, fg = 'g' .. k}
end
local fields = {'p', 's', 'c', 't', 'e'}
for _, x in ipairs(b) do
  fields[#fields + 1] = x.fa
  fields[#fields + 1] = x.ff
  fields[#fields + 1] = x.fg
end
local st = redis.call('HMGET', key, unpack(fields))
local paused = paused_for(now, st[1])
local sh, ceil = share(st[2], st[3], st[4], now)

-- Each bucket's delay until its own slot; the call's is the latest.
local delay = 0
for i, x in ipairs(b) do
  x.pr = paced(x.pr, sh)
  x.at, x.frac, x.g, x.guarded, x.delay = due(now, guard, x.rl, x.pr, x.burst, x.n, st[3 + 3 * i], st[4 + 3 * i], st[5 + 3 * i])
  if x.delay > delay then delay = x.delay end
end

local function reply(taken, retry, booked)
  local r = {taken, delay, retry, paused, 0, 0, b[1].pr, sh, math.floor(ceil * 100), now + delay}
  if booked then r[5], r[6] = b[1].at, b[1].frac end
  if #b > 1 then
    for i = 2, #b do
      local x = b[i]
      if booked then
        r[#r + 1], r[#r + 2] = x.at, x.frac
      else
        r[#r + 1], r[#r + 2] = 0, 0
      end
      r[#r + 1] = x.pr
    end
  end
  return r
end

if delay > maxwait then return reply(0, delay - maxwait, false) end
if not reserve then return reply(1, 0, false) end

local slot = now + delay
local set = {}
local life = paused
for _, x in ipairs(b) do
  local gv, l
  x.at, x.frac, gv, l = book(now, slot, delay, x.rl, x.pr, x.burst, x.n, x.at, x.frac, x.g, x.guarded, x.delay)
  set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = x.fa, int(x.at), x.ff, int(x.frac)
  if gv then set[#set + 1], set[#set + 2] = x.fg, gv end
  if l > life then life = l end
end
life = renew(now, life, ceil, st[5])
if life then
  set[#set + 1], set[#set + 2] = 'e', int(now + life)
  redis.call('HSET', key, unpack(set))
  redis.call('PEXPIRE', key, math.ceil(life / 1000) + 1 + pad)
else
  redis.call('HSET', key, unpack(set))
end
return reply(1, 0, true)
