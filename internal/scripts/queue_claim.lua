-- Pick the next tenant with work, round-robin (weighted), and show its
-- oldest job without removing it. Tenants whose sleep has ended rejoin the
-- ring first; tenants found with no work leave it.
-- KEYS     1 ring, 2 sleeping tenants (sorted set by wake time, µs),
--          3 set of tenants in the ring or asleep, 4 weights hash,
--          5 turns hash (jobs taken in the current turn), 6 handed-over
--          jobs (sorted set by hand-over time)
-- ARGV     1 prefetch (most handed-over jobs at once), 2 the prefix of the
--          tenants' list keys (the tenant's encoded id follows), 3 now in
--          µs or "" for the server's TIME
-- Uses     prelude.lua (clock)
-- Returns  {1, tenant, envelope}  the tenant and its oldest job
--          {0, wait µs}           nothing ready; the next sleeper wakes in
--                                 wait µs (-1: nobody sleeps)
--          {2, handed over}       prefetch is full
local now = clock(ARGV[3])
local handed = redis.call('ZCARD', KEYS[6])
if handed >= tonumber(ARGV[1]) then return {2, handed} end
local woken = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
for _, t in ipairs(woken) do
  redis.call('ZREM', KEYS[2], t)
  redis.call('RPUSH', KEYS[1], t)
end
for _ = 1, 32 do
  local tenant = redis.call('LINDEX', KEYS[1], 0)
  if not tenant then break end
  local head = redis.call('LINDEX', ARGV[2] .. tenant, 0)
  if not head then
    redis.call('LPOP', KEYS[1])
    redis.call('SREM', KEYS[3], tenant)
    redis.call('HDEL', KEYS[4], tenant)
    redis.call('HDEL', KEYS[5], tenant)
  else
    local weight = tonumber(redis.call('HGET', KEYS[4], tenant) or '1')
    if redis.call('HINCRBY', KEYS[5], tenant, 1) >= weight then
      redis.call('HDEL', KEYS[5], tenant)
      redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
    end
    return {1, tenant, head}
  end
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first[2] then
  local wait = tonumber(first[2]) - now
  if wait < 0 then wait = 0 end
  return {0, wait}
end
return {0, -1}
