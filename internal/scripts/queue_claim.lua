-- Pick tenants with work round-robin (weighted) and take their oldest jobs
-- for the hand-over to asynq, up to a batch. The worker books each job's throttle slot
-- (throttle.Wait); a job whose slot is too far away goes
-- back to the head of its tenant's list (queue_untake.lua), its tenant
-- asleep until then, and marks its throttle key "full until then" in the
-- full set. A claim takes no job whose key is marked: the tenant sleeps
-- until the mark ends, its job left at the head of its list. So a tenant
-- at its quota, or on a paused downstream, costs one hand-over per mark,
-- not one per claim, and every tenant on a marked shared key is skipped
-- without being handed over. Tenants whose sleep has ended rejoin the
-- ring, and jobs for later whose time has come join the tail of their
-- tenant's list (at most 1,000 a claim); tenants found with no work leave
-- the ring. A taken job's entry moves to the handing set in this same
-- step (hand_over), and is returned for the dispatcher to write asynq's
-- task and clear it (queue_handover.lua). Text that is no entry stops the
-- batch and is shown to the dispatcher, which hands it over in its place
-- as a task for asynq to archive (queue_take.lua).
-- KEYS     1 ring, 2 sleeping tenants (sorted set by wake time, µs),
--          3 set of tenants in the ring or asleep, 4 weights hash,
--          5 turns hash (jobs taken in the current turn), 6 meta hash,
--          7 per-class count of waiting jobs, 8 ids hash, 9 asynq's
--          pending list (see queue_handover.lua), 10 why each tenant
--          sleeps (see queue_untake.lua), 11 jobs for later, 12 jobs for
--          later per tenant (see queue_enqueue.lua), 13 full set
--          (throttle key -> until when, µs: see queue_untake.lua), 14
--          held ids, 15 handing set (see queue_handover.lua)
-- ARGV     1 prefetch (the most tasks asynq's pending list and the
--          handing set may hold before a claim takes more), 2 the prefix of the
--          tenants' list keys (the tenant's encoded id follows), 3 now in
--          µs or "" for the server's TIME, 4 the most jobs to take,
--          5 how long an id stays held at most (µs), 6 how old (µs) an
--          entry of the handing set is before a claim takes it again
-- A job's throttle key is read from its entry's header: the field
-- downstream (see queue_handover.lua); its marks are <downstream>
-- for a shared bucket and <downstream>/<encoded tenant> for a tenant's own.
-- Uses     prelude.lua (int, clock), queue_handover.lua
-- Returns  {"taken", n, next, wait, entry...}
--                                  n entries to hand over, which follow; next is "now" when
--                                  the next claim should come at once (the
--                                  batch was full and the prefetch has
--                                  room, or the ring was not all seen),
--                                  "full" when the prefetch is now full,
--                                  else "poll", with wait as idle's
--          {"junk", tenant, text, entry...}  text that is no entry at
--                                  the head of the tenant's list, and the
--                                  entries taken before it
--          {"idle", wait}          nothing ready; the next sleeper wakes,
--                                  or the next job for later is due, in
--                                  wait µs (-1: none)
--          {"full", pending}       the prefetch is full
local H = {ids = KEYS[8], held = KEYS[14], handing = KEYS[15], hold = tonumber(ARGV[5])}
local now = clock(ARGV[3])
local handed = redis.call('LLEN', KEYS[9]) + redis.call('ZCARD', KEYS[15])
local prefetch, batch = tonumber(ARGV[1]), tonumber(ARGV[4])
local room = math.min(prefetch - handed, batch)
if room <= 0 then return {'full', handed} end
-- out: the entries to hand over, in order. Entries a dispatcher took and
-- never cleared (it died between the two steps) are taken again first,
-- once older than ARGV 6: their tasks may be in asynq already, which
-- then refuses them by their task id.
local out = redis.call('ZRANGEBYSCORE', KEYS[15], '-inf', now - tonumber(ARGV[6]), 'LIMIT', 0, room)
if #out > 0 then
  local again = {}
  for _, e in ipairs(out) do
    again[#again + 1] = int(now)
    again[#again + 1] = e
  end
  redis.call('ZADD', KEYS[15], unpack(again))
end
local woken = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
local n, empties, more = #out, 0, #woken == 1000
if #woken > 0 then
  redis.call('ZREM', KEYS[2], unpack(woken))
  redis.call('HDEL', KEYS[10], unpack(woken))
  redis.call('RPUSH', KEYS[1], unpack(woken))
end
local due = redis.call('ZRANGEBYSCORE', KEYS[11], '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  local moved = {}
  for _, m in ipairs(due) do
    local sp = string.find(m, ' ', 1, true)
    local t = string.sub(m, 1, sp - 1)
    if redis.call('RPUSH', ARGV[2] .. t, string.sub(m, sp + 1)) == 1 and redis.call('SADD', KEYS[3], t) == 1 then
      redis.call('RPUSH', KEYS[1], t)
    end
    moved[t] = (moved[t] or 0) + 1
  end
  for t, c in pairs(moved) do
    if redis.call('HINCRBY', KEYS[12], t, -c) <= 0 then redis.call('HDEL', KEYS[12], t) end
  end
  redis.call('ZREM', KEYS[11], unpack(due))
  if #due == 1000 then more = true end
end
-- Marks that have ended are dropped; with none left (the common case), a
-- job's key is not looked up at all.
redis.call('ZREMRANGEBYSCORE', KEYS[13], '-inf', now)
local marked = redis.call('ZCARD', KEYS[13]) > 0
-- MARKED is why a tenant sleeps until a mark ends.
local MARKED = 'slot: its downstream is full or paused (marked by a worker)'
-- until_of returns when the marks on the throttle keys of a job of the
-- tenant end (nil: none), its downstream read from the header of its
-- entry, which ends at lf.
local function until_of(tenant, entry, lf)
  local ds = field(entry, lf, '\tdownstream=')
  if not ds or ds == '' then return nil end
  local s = redis.call('ZMSCORE', KEYS[13], ds, ds .. '/' .. tenant)
  local u = math.max(tonumber(s[1] or '0'), tonumber(s[2] or '0'))
  if u > now then return u end
  return nil
end
-- Tenants' weights, read once per claim; none are stored while every
-- tenant has the default weight of 1.
local weights, weighted = {}, redis.call('HLEN', KEYS[4]) > 0
-- A turn takes up to q jobs of its tenant in one pop: the batch's room
-- shared over the tenants in the ring (one a turn when they outnumber
-- it), so a claim still serves them all in turn, a command a tenant
-- rather than a job.
local q = math.max(1, math.floor(room / math.max(1, redis.call('LLEN', KEYS[1]))))
-- The ring turns a chunk at a time: the claim pops the tenants it expects
-- to serve from the head in one command and, when it is done with them,
-- pushes those that still have work to the tail in one command (and what
-- it did not reach back to the head), in the order the tenants took their
-- turns. So a claim costs two commands of the ring, not one a tenant.
local chunk, at, served = {}, 1, {}
local function ring_back()
  local unseen = {}
  for i = #chunk, at, -1 do unseen[#unseen + 1] = chunk[i] end
  if #unseen > 0 then redis.call('LPUSH', KEYS[1], unpack(unseen)) end
  if #served > 0 then redis.call('RPUSH', KEYS[1], unpack(served)) end
  chunk, at, served = {}, 1, {}
end
while n < room and empties < 32 do
  if at > #chunk then
    -- Served tenants go to the tail first, so a short ring comes round
    -- again in the same claim, as it would turn by turn.
    ring_back()
    chunk = redis.call('LPOP', KEYS[1], room - n) or {}
    if #chunk == 0 then break end
  end
  local tenant = chunk[at]
  at = at + 1
  local list = ARGV[2] .. tenant
  -- The tenant takes its turn, and more while its weight gives it more.
  local again = true
  while again and n < room do
    again = false
    local got = redis.call('LPOP', list, math.min(q, room - n))
    if not got then
      empties = empties + 1
      redis.call('SREM', KEYS[3], tenant)
      if weighted then
        redis.call('HDEL', KEYS[4], tenant)
        redis.call('HDEL', KEYS[5], tenant)
      end
    else
      -- Hand the jobs over in order up to the first that is no entry or
      -- whose throttle key is marked full; that one and those behind it go
      -- back to the head of the list.
      local stop, junk, wake, why
      for i, h in ipairs(got) do
        local task, class, lf = read(h)
        if not task then
          stop, junk = i, true
          break
        end
        wake = marked and until_of(tenant, h, lf)
        if wake then
          stop, why = i, MARKED
          break
        end
        hand_over(H, task, h, now)
        out[#out + 1] = h
        n = n + 1
      end
      if stop then
        local back = {}
        for j = #got, stop, -1 do back[#back + 1] = got[j] end
        redis.call('LPUSH', list, unpack(back))
      end
      if junk then
        -- The tenant stays at the head of the ring.
        at = at - 1
        ring_back()
        flush(H)
        return {'junk', tenant, got[stop], unpack(out)}
      end
      if wake then
        -- Asleep until the mark ends: out of the ring.
        redis.call('ZADD', KEYS[2], int(wake), tenant)
        redis.call('HSET', KEYS[10], tenant, string.sub(tenant, 2) .. '\t' .. why)
      else
        local weight = weights[tenant]
        if not weight then
          weight = weighted and tonumber(redis.call('HGET', KEYS[4], tenant) or '1') or 1
          weights[tenant] = weight
        end
        again = weight > 1 and redis.call('HINCRBY', KEYS[5], tenant, 1) < weight
        if weight > 1 and not again then redis.call('HDEL', KEYS[5], tenant) end
        if not again then served[#served + 1] = tenant end
      end
    end
  end
  -- A weighted tenant stopped by the batch's end keeps its place at the
  -- head, with the turns it has left.
  if again then at = at - 1 end
end
ring_back()
flush(H)
-- A claim that stopped at its limit of emptied tenants leaves more of the
-- ring unseen: the next claim comes at once, even with nothing taken.
if empties >= 32 and n < room then more = true end
-- next_wait returns when the next sleeper wakes, or the next job for
-- later is due, in µs from now (-1: none).
local function next_wait()
  local wait = -1
  for _, k in ipairs({KEYS[2], KEYS[11]}) do
    local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
    if first[2] then
      local w = math.max(0, tonumber(first[2]) - now)
      if wait < 0 or w < wait then wait = w end
    end
  end
  return wait
end
if n > 0 or more then
  if more or (n == batch and prefetch - handed > n) then
    return {'taken', n, 'now', 0, unpack(out)}
  elseif handed + n >= prefetch then
    return {'taken', n, 'full', 0, unpack(out)}
  end
  return {'taken', n, 'poll', next_wait(), unpack(out)}
end
return {'idle', next_wait()}
