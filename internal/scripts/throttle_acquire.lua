-- Take a leased concurrency slot, or extend one held. Leases are members
-- of a sorted set scored by their expiry, so a worker that dies gives its
-- slot back when its lease runs out.
-- KEYS[1]  the sorted set of leases
-- ARGV     1 the most leases at once, 2 lease id, 3 lease length (µs),
--          4 now in µs or "" for TIME, 5 1 to extend only: a lease that
--          ran out (or was given back) is lost, never taken again, since
--          its slot may have served another call meanwhile
-- Uses     prelude.lua (int, clock)
-- Returns  {taken (1/0, 2: lost), leases in use, retry after (µs) when
--          not taken}
local key = KEYS[1]
local most, id, life = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local now, pad = clock(ARGV[4])
redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
local used = redis.call('ZCARD', key)
local held = redis.call('ZSCORE', key, id)
if ARGV[5] == '1' and not held then return {2, used, 0} end
if used >= most and not held then
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, used, tonumber(first[2]) - now}
end
redis.call('ZADD', key, int(now + life), id)
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', key, math.ceil((tonumber(last[2]) - now) / 1000) + 1 + pad)
return {1, redis.call('ZCARD', key), 0}
