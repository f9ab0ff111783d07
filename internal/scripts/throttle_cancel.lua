-- Give back a reservation that will not be used, if no later reservation
-- was made since: move the TAT back by its n units. A reservation followed
-- by others cannot be undone without moving theirs, so it is kept. The TAT
-- never moves back into a pause: not before where throttle_pause.lua put
-- it (the pause's end plus burst-1 intervals), so that a slot booked next
-- is never inside the pause.
--
-- With further buckets (throttle.Limit.Also), each gives back its count
-- the same way, if it is as the reservation left it; one that a pause
-- moved since stays where the pause put it. Whether a later reservation
-- was made is read from the first bucket, which every reservation books.
-- KEYS[1]  the bucket's hash (see throttle_reserve.lua)
-- ARGV     1 rl, 2 pr, 3 cost n, 4 a and 5 f as the reservation returned
--          them, 6 burst; then the same six for each further bucket
--          (its rl, the pr it was paced at, its count, its a and f, its
--          burst)
-- Uses     prelude.lua (int)
-- Returns  1 if given back, 0 if not
local key = KEYS[1]
local fields = {'p'}
for i = 1, #ARGV, 6 do
  local k = (i - 1) / 6
  if k == 0 then
    fields[#fields + 1], fields[#fields + 2] = 'a', 'f'
  else
    fields[#fields + 1], fields[#fields + 2] = 'a' .. k, 'f' .. k
  end
end
local st = redis.call('HMGET', key, unpack(fields))
if st[2] ~= ARGV[4] or st[3] ~= ARGV[5] then return 0 end
local set = {}
for i = 1, #ARGV, 6 do
  local j = 2 + 2 * (i - 1) / 6 -- this bucket's a in st and fields
  if st[j] == ARGV[i + 3] and st[j + 1] == ARGV[i + 4] then
    local rl, pr, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    local a, f = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
    local back = n * pr
    local k = math.ceil((back - f) / rl) -- whole µs to borrow
    if k < 0 then k = 0 end
    a = a - k
    f = f + k * rl - back
    if st[1] then
      local lead = (tonumber(ARGV[i + 5] or '1') - 1) * pr
      local pa, pf = tonumber(st[1]) + math.floor(lead / rl), lead % rl
      if a < pa or (a == pa and f < pf) then a, f = pa, pf end
    end
    set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = fields[j], int(a), fields[j + 1], int(f)
  end
end
redis.call('HSET', key, unpack(set))
return 1
