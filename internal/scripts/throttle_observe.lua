-- Follow what the API reports of a key's buckets: each bucket named is
-- moved so that it holds no more than the units the API said were left.
-- A bucket of burst B that may hold L units has its TAT at least
-- now + (B - L) intervals (at the bucket's paced interval, prelude.lua's
-- share and paced): the next call of n <= L units is due now, one of more
-- waits for the rest to refill at the bucket's own rate. A bucket that
-- holds less already is left alone: the throttle takes the API's word
-- only for less than it believes, never for more. A moved bucket's key
-- lives at least as long as its TAT, as throttle_settle.lua renews it.
-- KEYS[1]  the bucket's hash (see throttle_reserve.lua)
-- ARGV     1 now in µs or "" for the server's TIME (tests only); then for
--          each bucket in fives: its index (0 for the Limit's own, i for
--          Also's i-th), rl, pr (the rate's, before the share), burst, and
--          L, the units it may hold (0 <= L < burst)
-- Uses     prelude.lua (int, clock, share, paced)
-- Returns  the number of buckets moved
local key = KEYS[1]
local now, pad = clock(ARGV[1])
local fields = {'s', 'c', 't', 'e'}
local b = {}
for i = 2, #ARGV, 5 do
  local k = ARGV[i]
  local x = {rl = tonumber(ARGV[i + 1]), pr = tonumber(ARGV[i + 2]), burst = tonumber(ARGV[i + 3]),
             left = tonumber(ARGV[i + 4]), fa = 'a', ff = 'f'}
  if k ~= '0' then x.fa, x.ff = 'a' .. k, 'f' .. k end
  b[#b + 1] = x
  fields[#fields + 1], fields[#fields + 2] = x.fa, x.ff
end
local st = redis.call('HMGET', key, unpack(fields))
local sh = share(st[1], st[2], st[3], now)
local set = {}
local far, moved = 0, 0
for i, x in ipairs(b) do
  local pr = paced(x.pr, sh)
  local a, f = now, 0
  if st[3 + 2 * i] then a, f = tonumber(st[3 + 2 * i]), tonumber(st[4 + 2 * i]) end
  -- a drained bucket is empty: what lies behind now is no credit
  if a < now then a, f = now, 0 end
  local lead = (x.burst - x.left) * pr
  local wa, wf = now + math.floor(lead / x.rl), lead % x.rl
  if wa > a or (wa == a and wf > f) then
    a, f = wa, wf
    set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = x.fa, int(a), x.ff, int(f)
    moved = moved + 1
  end
  local l = a - now
  if f > 0 then l = l + 1 end
  if l > far then far = l end
end
if moved == 0 then return 0 end
if not st[4] or tonumber(st[4]) < now + far then
  local life = math.ceil(far * 1.5)
  set[#set + 1], set[#set + 2] = 'e', int(now + life)
  redis.call('HSET', key, unpack(set))
  local ms = math.ceil(life / 1000) + 1 + pad
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
else
  redis.call('HSET', key, unpack(set))
end
return moved
