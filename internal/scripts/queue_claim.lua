-- Pick tenants with work round-robin (weighted) and take their oldest jobs
-- out of the waiting room, up to a batch, to hand them to asynq. A job that
-- names a downstream, when the dispatcher must first check its throttle,
-- is only shown, not taken (the batch stops there); the dispatcher then
-- takes it with queue_take.lua or puts its tenant to sleep. Tenants whose
-- sleep has ended rejoin the ring first; tenants found with no work leave
-- it. Taken jobs stay counted in the queue's depth until their handler
-- starts (queue_start.lua), and are remembered as handed over, so that a
-- dispatcher that dies before asynq has them does not lose them.
-- KEYS     1 ring, 2 sleeping tenants (sorted set by wake time, µs),
--          3 set of tenants in the ring or asleep, 4 weights hash,
--          5 turns hash (jobs taken in the current turn), 6 handed-over
--          jobs (sorted set of job keys by hand-over time), 7 handed-over
--          envelopes (hash by job key). A job's key is <id>@<nonce>, or
--          its id for envelopes written before nonces existed.
-- ARGV     1 prefetch (most handed-over jobs at once), 2 the prefix of the
--          tenants' list keys (the tenant's encoded id follows), 3 now in
--          µs or "" for the server's TIME, 4 the most jobs to take, 5 "1"
--          if jobs that name a downstream must be shown, not taken
-- Uses     prelude.lua (int, clock)
-- Returns  {3, n, tenant, envelope, ...}  n jobs taken
--          {1, tenant, envelope}         a job to check before taking
--          {0, wait µs}                  nothing ready; the next sleeper
--                                        wakes in wait µs (-1: none)
--          {2, handed over}              prefetch is full
-- The key of the job whose envelope is env: the id and the nonce are the
-- envelope's first two fields (ids and nonces need no JSON escaping).
local function jobkey(env)
  local id, nonce = string.match(env, '^{"id":"([^"]*)","nonce":"([^"]*)"')
  if id then return id .. '@' .. nonce end
  local j = cjson.decode(env)
  if type(j.nonce) == 'string' and j.nonce ~= '' then return j.id .. '@' .. j.nonce end
  return j.id
end
local now = clock(ARGV[3])
local handed = redis.call('ZCARD', KEYS[6])
local room = math.min(tonumber(ARGV[1]) - handed, tonumber(ARGV[4]))
if room <= 0 then return {2, handed} end
local peek = ARGV[5] == '1'
local woken = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
for _, t in ipairs(woken) do
  redis.call('ZREM', KEYS[2], t)
  redis.call('RPUSH', KEYS[1], t)
end
local out, n, empties = {3, 0}, 0, 0
while n < room and empties < 32 do
  local tenant = redis.call('LINDEX', KEYS[1], 0)
  if not tenant then break end
  local list = ARGV[2] .. tenant
  local head = redis.call('LINDEX', list, 0)
  if not head then
    empties = empties + 1
    redis.call('LPOP', KEYS[1])
    redis.call('SREM', KEYS[3], tenant)
    redis.call('HDEL', KEYS[4], tenant)
    redis.call('HDEL', KEYS[5], tenant)
  else
    -- Payloads are base64 in the envelope, and string fields escape
    -- their quotes, so this text only ever is the downstream field.
    local check = peek and string.find(head, '"downstream":"', 1, true)
    if check and n > 0 then break end
    local weight = tonumber(redis.call('HGET', KEYS[4], tenant) or '1')
    if weight <= 1 or redis.call('HINCRBY', KEYS[5], tenant, 1) >= weight then
      if weight > 1 then redis.call('HDEL', KEYS[5], tenant) end
      redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
    end
    if check then return {1, tenant, head} end
    local key = jobkey(head)
    redis.call('LPOP', list)
    redis.call('ZADD', KEYS[6], int(now), key)
    redis.call('HSET', KEYS[7], key, head)
    n = n + 1
    out[#out + 1] = tenant
    out[#out + 1] = head
  end
end
if n > 0 then
  out[2] = n
  return out
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first[2] then
  local wait = tonumber(first[2]) - now
  if wait < 0 then wait = 0 end
  return {0, wait}
end
return {0, -1}
