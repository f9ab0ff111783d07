-- Pick tenants with work round-robin (weighted) and hand their oldest jobs
-- to asynq, up to a batch. A job that names a downstream, when the
-- dispatcher must first check its throttle, is taken only while its
-- throttle key has budget left: units the dispatcher found free within its
-- horizon when it last looked (ARGV 8 on). A job without budget is only
-- shown, not taken (the batch stops there); the dispatcher then looks at
-- its throttle and sets a budget, puts its tenant to sleep, or takes it
-- with queue_take.lua. So is text that is no entry, which the
-- dispatcher hands over in its place as a task for asynq to archive. Tenants whose sleep has ended rejoin the
-- ring; tenants found with no work leave it. A taken job is written into
-- asynq in this same step (hand_over) and leaves the waiting room's
-- counts; asynq's pending list holds it until a worker takes it.
-- KEYS     1 ring, 2 sleeping tenants (sorted set by wake time, µs),
--          3 set of tenants in the ring or asleep, 4 weights hash,
--          5 turns hash (jobs taken in the current turn), 6 meta hash,
--          7 per-class count of waiting jobs, 8 ids hash, 9 asynq's
--          pending list (see queue_handover.lua), 10 why each tenant
--          sleeps (see queue_sleep.lua), 11 jobs for later, 12 jobs for
--          later per tenant (see queue_enqueue.lua)
-- ARGV     1 prefetch (the most tasks asynq's pending list may hold
--          before a claim hands more over), 2 the prefix of the
--          tenants' list keys (the tenant's encoded id follows), 3 now in
--          µs or "" for the server's TIME, 4 the most jobs to take, 5 "1"
--          if jobs that name a downstream must be shown, not taken,
--          6 asynq's task key prefix, 7 asynq's TaskMessage field
--          Retention, encoded ("" for none), 8 on: pairs of a throttle
--          key (the downstream's name, or name/encoded tenant for
--          per-tenant quotas) and its budget in units
-- A job's key and cost are read from its envelope: the fields
-- "downstream" (names are [A-Za-z0-9_.-]) and "cost" (1 when absent).
-- Uses     prelude.lua (int, clock), queue_handover.lua
-- Returns  {3, n, more, b...}           n jobs handed over; more is 1
--                                       when the next claim should come
--                                       at once (the batch was full and
--                                       the prefetch has room, or a job
--                                       to check is next), 2 when the
--                                       prefetch is now full, else 0; b,
--                                       the budgets left, in ARGV's order
--          {1, tenant, entry}           a job to check before taking
--          {4, tenant, text}            text that is no entry
--          {0, wait µs}                 nothing ready; the next sleeper
--                                       wakes, or the next job for later
--                                       is due, in wait µs (-1: none)
--          {2, pending}                 prefetch is full
local H = {meta = KEYS[6], cdepth = KEYS[7], ids = KEYS[8], pending = KEYS[9],
  taskprefix = ARGV[6], retention = ARGV[7]}
local now = clock(ARGV[3])
local handed = redis.call('LLEN', KEYS[9])
local room = math.min(tonumber(ARGV[1]) - handed, tonumber(ARGV[4]))
if room <= 0 then return {2, handed} end
local peek = ARGV[5] == '1'
local budget, order = {}, {}
for i = 8, #ARGV - 1, 2 do
  budget[ARGV[i]] = tonumber(ARGV[i + 1])
  order[#order + 1] = ARGV[i]
end
-- spend takes a job's cost from its key's budget, if the key has enough.
local function spend(tenant, entry)
  local ds = string.match(entry, '"downstream":"([%w_%.%-]+)"')
  if not ds then return false end
  local key = ds .. '/' .. tenant
  if not budget[key] then key = ds end
  local left = budget[key]
  local cost = tonumber(string.match(entry, '"cost":(%d+)') or '1')
  if not left or left < cost then return false end
  budget[key] = left - cost
  return true
end
local function reply(n, more)
  local r = {3, n, more}
  for _, k in ipairs(order) do r[#r + 1] = budget[k] end
  return r
end
local n, empties, more = 0, 0, 0
local woken = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
for _, t in ipairs(woken) do
  redis.call('ZREM', KEYS[2], t)
  redis.call('HDEL', KEYS[10], t)
  redis.call('RPUSH', KEYS[1], t)
end
local due = redis.call('ZRANGEBYSCORE', KEYS[11], '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  local back = {}
  for _, m in ipairs(due) do
    local sp = string.find(m, ' ', 1, true)
    local t = string.sub(m, 1, sp - 1)
    if redis.call('RPUSH', ARGV[2] .. t, string.sub(m, sp + 1)) == 1 and redis.call('SADD', KEYS[3], t) == 1 then
      redis.call('RPUSH', KEYS[1], t)
    end
    back[t] = (back[t] or 0) + 1
  end
  for t, c in pairs(back) do
    if redis.call('HINCRBY', KEYS[12], t, -c) <= 0 then redis.call('HDEL', KEYS[12], t) end
  end
  redis.call('ZREM', KEYS[11], unpack(due))
  if #due == 1000 then more = 1 end
end
-- Tenants' weights, read once per claim; none are stored while every
-- tenant has the default weight of 1.
local weights, weighted = {}, redis.call('HLEN', KEYS[4]) > 0
-- A turn takes up to q jobs of its tenant in one pop: the batch's room
-- shared over the tenants in the ring (one a turn when they outnumber
-- it), so a claim still serves them all in turn, a command a tenant
-- rather than a job.
local q = math.max(1, math.floor(room / math.max(1, redis.call('LLEN', KEYS[1]))))
while n < room and empties < 32 do
  -- The head tenant takes its turn: rotated to the tail at once, and back
  -- to the head if its weight gives it more turns.
  local tenant = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
  if not tenant then break end
  local list = ARGV[2] .. tenant
  local got = redis.call('LPOP', list, math.min(q, room - n))
  if not got then
    empties = empties + 1
    redis.call('RPOP', KEYS[1])
    redis.call('SREM', KEYS[3], tenant)
    if weighted then
      redis.call('HDEL', KEYS[4], tenant)
      redis.call('HDEL', KEYS[5], tenant)
    end
  else
    -- Hand the jobs over in order up to the first that is no entry or
    -- must be checked first (its throttle key has no budget left, and
    -- budgets are spent as jobs are taken: payloads are base64 in the
    -- envelope and string fields escape their quotes, so this text only
    -- ever is the downstream field). That one and those behind it go back.
    local stop, status
    for i, h in ipairs(got) do
      local task, class, msg = read(h)
      if not task or (peek and string.find(h, '"downstream":"', 1, true) and not spend(tenant, h)) then
        stop, status = i, task and 1 or 4
        break
      end
      hand_over(H, task, class, msg, now)
      n = n + 1
    end
    if stop then
      local back = {}
      for j = #got, stop, -1 do back[#back + 1] = got[j] end
      redis.call('LPUSH', list, unpack(back))
      if n > 0 then
        redis.call('LMOVE', KEYS[1], KEYS[1], 'RIGHT', 'LEFT')
        more = 1
        break
      end
    end
    local weight = weights[tenant]
    if not weight then
      weight = weighted and tonumber(redis.call('HGET', KEYS[4], tenant) or '1') or 1
      weights[tenant] = weight
    end
    if weight > 1 then
      if redis.call('HINCRBY', KEYS[5], tenant, 1) < weight then
        redis.call('LMOVE', KEYS[1], KEYS[1], 'RIGHT', 'LEFT')
      else
        redis.call('HDEL', KEYS[5], tenant)
      end
    end
    if stop then return {status, tenant, got[stop]} end
  end
end
flush(H)
-- A claim that stopped at its limit of emptied tenants leaves more of the
-- ring unseen: the next claim comes at once, even with nothing taken.
if empties >= 32 and n < room then more = 1 end
if n > 0 or more == 1 then
  if n == tonumber(ARGV[4]) and tonumber(ARGV[1]) - handed > n then more = 1 end
  if more == 0 and handed + n >= tonumber(ARGV[1]) then more = 2 end
  return reply(n, more)
end
local wait = -1
for _, k in ipairs({KEYS[2], KEYS[11]}) do
  local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  if first[2] then
    local w = math.max(0, tonumber(first[2]) - now)
    if wait < 0 or w < wait then wait = w end
  end
end
return {0, wait}
