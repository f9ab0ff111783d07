-- Helpers of the scripts that move jobs between the waiting room and asynq
-- (queue_claim.lua, queue_take.lua, queue_enqueue.lua, queue_reconcile.lua).
-- Defines no keys and reads no arguments: callers pass a table H of names
-- and settings, all under the queue's hash tag, which is asynq's own:
--   H.handed     sorted set: handed-over jobs by job key, scored in the
--                order they were pushed onto asynq's pending list
--   H.hinfo      hash: job key -> "<task id> <tenant> <id> <class>"
--   H.meta       hash: depth (jobs waiting or handed over, not started),
--                handseq (the last handed score)
--   H.tdepth, H.cdepth, H.ids   per-tenant, per-class and per-id counts
--   H.pending    asynq:{Q}:pending
--   H.taskprefix asynq:{Q}:t:
--   H.queue      the queue's name; H.retention asynq's Retention in s
--
-- A job is handed over by writing its asynq task exactly as asynq's
-- Client.Enqueue (v0.26) writes one: the hash asynq:{Q}:t:<task id> with
-- msg (asynq's TaskMessage, protocol buffers), state "pending" and
-- pending_since (ns), and the task id pushed on the pending list. The
-- step that takes it out of the waiting room does it, so a job is never
-- taken without being handed over. internal/scripts's tests check the
-- bytes against asynq's own Client.
--
-- A handed-over job leaves the depth when asynq gives it to a worker: its
-- task's state is then no longer "pending". reconcile() counts such jobs
-- out, oldest first.
-- Uses prelude.lua (int).

-- Protocol buffers, the two wire types asynq's TaskMessage needs here,
-- written without tables: this runs for every job handed over.
local char = string.char
local function varint(n)
  if n < 128 then return char(n) end
  local s = ''
  while n >= 128 do
    local b = n % 128
    s = s .. char(b + 128)
    n = (n - b) / 128
  end
  return s .. char(n)
end
-- A length-delimited field (wire type 2); proto3 leaves out empty ones.
local function pb_bytes(field, s)
  if s == '' then return '' end
  return char(field * 8 + 2) .. varint(#s) .. s
end
-- A varint field (wire type 0) of a value >= 0; proto3 leaves out zero.
local function pb_uint(field, n)
  if n == 0 then return '' end
  return char(field * 8) .. varint(n)
end

-- hand_over writes the job whose envelope is env (tenant enc) into asynq
-- and records it as handed over; flush(H) ends a batch of them. now is in
-- µs. Returns the job key.
local function hand_over(H, env, enc, now)
  local j = cjson.decode(env)
  local key = j.id
  if type(j.nonce) == 'string' and j.nonce ~= '' then key = key .. '@' .. j.nonce end
  -- queue.Job's defaults: max_retry 0 is 25, -1 none; timeout 0 is 30
  -- minutes. asynq counts the retries left, in whole seconds of timeout.
  local retry = tonumber(j.max_retry) or 0
  if retry == 0 then retry = 25 elseif retry < 0 then retry = 0 end
  retry = math.max(retry - (tonumber(j.retried) or 0), 0)
  local timeout = tonumber(j.timeout) or 0
  if timeout <= 0 then timeout = 1800 else timeout = math.floor(timeout / 1e9) end
  if not H.seq then
    H.seq = tonumber(redis.call('HGET', H.meta, 'handseq') or '0')
    H.zadd, H.info, H.push, H.types = {}, {}, {}, {}
    -- The fields every task of the queue shares: queue and retention.
    H.tail = pb_bytes(4, H.queue)
    H.retain = pb_uint(12, H.retention)
  end
  H.seq = math.max(H.seq + 1, now)
  -- The task id is new: the nonce is random for each enqueue, and moves
  -- counts the job's hand-overs.
  local task = 'sluice:' .. key .. ':' .. int(tonumber(j.moves) or 0)
  local typ = H.types[j.type]
  if not typ then
    typ = pb_bytes(1, j.type)
    H.types[j.type] = typ
  end
  -- Fields in number order, as asynq's Client (Go's protobuf) writes them.
  local msg = typ .. '\18' .. varint(#env) .. env .. '\26' .. varint(#task) .. task .. H.tail
    .. pb_uint(5, retry) .. pb_uint(8, timeout) .. H.retain
  redis.call('HSET', H.taskprefix .. task, 'msg', msg, 'state', 'pending', 'pending_since', int(now) .. '000')
  local z, i = H.zadd, H.info
  z[#z + 1] = int(H.seq)
  z[#z + 1] = key
  i[#i + 1] = key
  i[#i + 1] = task .. ' ' .. enc .. ' ' .. j.id .. ' ' .. (j.class or 'default')
  H.push[#H.push + 1] = task
  return key
end

-- flush writes what hand_over batched: the pending list's pushes, in
-- order (asynq dequeues from the other end), the handed scores and hinfo.
local function flush(H)
  if not H.seq or #H.push == 0 then return end
  redis.call('LPUSH', H.pending, unpack(H.push))
  redis.call('ZADD', H.handed, unpack(H.zadd))
  redis.call('HSET', H.hinfo, unpack(H.info))
  redis.call('HSET', H.meta, 'handseq', int(H.seq))
  H.push, H.zadd, H.info = {}, {}, {}
end

-- add adds d to field f of hash h, deleting the field at 0 or below.
local function add(h, f, d)
  if redis.call('HINCRBY', h, f, d) <= 0 then redis.call('HDEL', h, f) end
end

-- reconcile counts out the handed-over jobs that asynq has given to a
-- worker (or that were deleted or archived while pending), oldest first,
-- and stops at the first still pending: asynq dequeues its pending list in
-- the order of the pushes, which is the order of the handed scores.
-- Looks at no more than most jobs. Returns how many it counted out.
local function reconcile(H, most)
  local n = 0
  while n < most do
    local batch = redis.call('ZRANGE', H.handed, 0, 31)
    if #batch == 0 then break end
    local infos = redis.call('HMGET', H.hinfo, unpack(batch))
    local out, ids, tenants, classes = 0, {}, {}, {}
    for i, key in ipairs(batch) do
      local info = infos[i]
      if info then
        local _, _, task, enc, id, class = string.find(info, '^(%S+) (%S+) (%S+) (.*)$')
        if redis.call('HGET', H.taskprefix .. task, 'state') == 'pending' then break end
        ids[#ids + 1] = id
        tenants[enc] = (tenants[enc] or 0) + 1
        classes[class] = (classes[class] or 0) + 1
      end
      out = i
    end
    if out == 0 then break end
    redis.call('ZREMRANGEBYRANK', H.handed, 0, out - 1)
    redis.call('HDEL', H.hinfo, unpack(batch, 1, out))
    -- An id is almost always counted once: delete those in one call.
    if #ids > 0 then
      local counts, gone = redis.call('HMGET', H.ids, unpack(ids)), {}
      for i, id in ipairs(ids) do
        if tonumber(counts[i] or '0') <= 1 then gone[#gone + 1] = id else add(H.ids, id, -1) end
      end
      if #gone > 0 then redis.call('HDEL', H.ids, unpack(gone)) end
    end
    for enc, c in pairs(tenants) do add(H.tdepth, enc, -c) end
    for class, c in pairs(classes) do add(H.cdepth, class, -c) end
    n = n + out
    if out < #batch then break end
  end
  if n > 0 then redis.call('HINCRBY', H.meta, 'depth', -n) end
  return n
end
