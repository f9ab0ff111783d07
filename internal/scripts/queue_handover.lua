-- Helpers of the scripts that hand jobs from the waiting room to asynq
-- (queue_claim.lua, queue_take.lua). Defines no keys and reads no
-- arguments: callers pass a table H of names and settings, all under the
-- queue's hash tag, which is asynq's own:
--   H.meta       hash: depth (jobs in the waiting room), undecodable (a
--                counter)
--   H.cdepth     hash: jobs in the waiting room, by metrics class; the
--                default class is not counted (queue_enqueue.lua)
--   H.ids        hash: job id -> how many jobs of that id are waiting
--   H.pending    asynq:{Q}:pending
--   H.taskprefix asynq:{Q}:t:
--   H.queue      the queue's name; H.retention asynq's Retention in s
--
-- A job is handed over by writing its asynq task exactly as asynq's
-- Client.Enqueue (v0.26) writes one: the hash asynq:{Q}:t:<task id> with
-- msg (asynq's TaskMessage, protocol buffers), state "pending" and
-- pending_since (ns), and the task id pushed on the pending list. The
-- step that takes it out of the waiting room does it, so a job is never
-- taken without being handed over; it leaves the waiting room's counts
-- (depth, class, id) in that step too. From then on asynq's pending list
-- holds it until a worker takes it, and the bound counts it there.
-- queue's TestHandOverWritesWhatAsynqWrites compares the bytes with
-- asynq's own Client.
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

-- field reads the length-delimited field whose tag is at p in msg: where
-- its contents start and end, or nil when msg does not hold one there.
local byte = string.byte
local function field(msg, p, tag)
  if byte(msg, p) ~= tag then return nil end
  p = p + 1
  local n, m, b = 0, 1, byte(msg, p)
  while b and b >= 128 and m < 34359738368 do
    n, m, p = n + (b - 128) * m, m * 128, p + 1
    b = byte(msg, p)
  end
  if not b or b >= 128 then return nil end
  n = n + b * m
  if p + n > #msg then return nil end
  return p + 1, p + n
end

-- task_of returns field 3 (the task id) of msg when msg starts with fields
-- 1 and 2 and then 3, as queue.Job.item writes them; nil for text of any
-- other shape, which the caller then archives.
local function task_of(msg)
  local _, e = field(msg, 1, 10)
  if e then _, e = field(msg, e + 1, 18) end
  local s
  if e then s, e = field(msg, e + 1, 26) end
  if s then return string.sub(msg, s, e) end
end

-- message returns the task id of the job of envelope env (the entry of
-- an earlier version, which held the bare envelope), its id (nil for text
-- that is no envelope), its metrics class and its asynq message
-- (queue.Job's taskID, maxRetry, timeout, class and item are the same in
-- Go).
-- Text that is not an envelope sluice wrote is handed over all the same,
-- so that it does not block every claim behind it: the worker cannot
-- decode it either and asynq archives it, where asynqmon shows it.
local function message(H, env)
  local ok, j = pcall(cjson.decode, env)
  local id
  if not ok or type(j) ~= 'table' or type(j.id) ~= 'string' or not string.find(j.id, '^[%w_.:%-]+$')
      or type(j.type) ~= 'string' or #j.type > 256 or not string.find(j.type, '^[%w_.:/%-]+$') then
    j = {id = 'undecodable-' .. redis.call('HINCRBY', H.meta, 'undecodable', 1), type = 'sluice.undecodable'}
  else
    id = j.id
  end
  local key = j.id
  if type(j.nonce) == 'string' and string.find(j.nonce, '^%x+$') then key = key .. '@' .. j.nonce end
  -- queue.Job's defaults: max_retry 0 is 25, -1 none; timeout 0 is 30
  -- minutes. asynq counts the retries left, in whole seconds of timeout
  -- (rounded up: under a second is not none).
  local retry = math.floor(tonumber(j.max_retry) or 0)
  if retry == 0 then retry = 25 elseif retry < 0 then retry = 0 end
  retry = math.max(retry - math.floor(tonumber(j.retried) or 0), 0)
  local timeout = tonumber(j.timeout) or 0
  if timeout <= 0 then timeout = 1800 else timeout = math.ceil(timeout / 1e9) end
  local task = 'sluice:' .. key .. ':' .. int(math.floor(tonumber(j.moves) or 0))
  local class = j.class
  if type(class) ~= 'string' or class == '' then class = 'default' end
  local typ = H.types[j.type]
  if not typ then
    typ = pb_bytes(1, j.type)
    H.types[j.type] = typ
  end
  -- Fields in number order, as asynq's Client (Go's protobuf) writes them.
  local msg = typ .. '\18' .. varint(#env) .. env .. '\26' .. varint(#task) .. task .. H.tail
    .. pb_uint(5, retry) .. pb_uint(8, timeout) .. H.retain
  return task, id, class, msg
end

-- hand_over writes the job of envelope env into asynq; it leaves the
-- waiting room's counts when flush(H) ends the batch. now is in µs.
local function hand_over(H, env, now)
  if not H.push then
    H.push, H.keyed, H.jobids, H.classes, H.types = {}, {}, {}, {}, {}
    H.since = int(now) .. '000'
    -- The fields every task of the queue shares: queue and retention.
    H.tail = pb_bytes(4, H.queue)
    H.retain = pb_uint(12, H.retention)
  end
  -- An entry of this version carries its message ready (queue.Job.item),
  -- less Retention, the last field, which only the workers know: for the
  -- default class the message alone, its task id read from field 3; for
  -- another, behind a header that says where the message holds the
  -- envelope and the task id (offset:length each), and the class.
  -- Anything else is an envelope of an earlier version, or text to
  -- archive.
  local task, msg, class
  if byte(env, 1) == 10 then
    task = task_of(env)
    if task then class, msg = 'default', env end
  else
    local off, len, cls, at = string.match(env, '^sluice2\t%d+:%d+:(%d+):(%d+)\t([^\t]+)\t()')
    if off then
      off = at + tonumber(off)
      task = string.sub(env, off, off + tonumber(len) - 1)
      class, msg = cls, string.sub(env, at)
    end
  end
  -- An entry's task id is sluice:<id>@<nonce>:<moves>. These checks
  -- accept what the capture of <id> in flush accepts ("sluice:", then at
  -- least one character before the first '@'); the capture itself waits
  -- until flush finds an id recorded at all, as it seldom does: it cost
  -- the claim about a tenth of its work per job.
  local keyed = task and string.sub(task, 1, 7) == 'sluice:' and byte(task, 8) ~= 64
    and string.find(task, '@', 9, true)
  local id
  if keyed then
    if H.retain ~= '' then msg = msg .. H.retain end
    H.keyed[#H.keyed + 1] = task
  else
    task, id, class, msg = message(H, env)
    if id then H.jobids[#H.jobids + 1] = id end
  end
  redis.call('HSET', H.taskprefix .. task, 'msg', msg, 'state', 'pending', 'pending_since', H.since)
  H.push[#H.push + 1] = task
  H.classes[class] = (H.classes[class] or 0) + 1
end

-- flush writes what hand_over batched: the pending list's pushes, in
-- order (asynq dequeues from the other end), and the waiting room's
-- counts: the depth, the classes and the ids lose the jobs.
local function flush(H)
  if not H.push or #H.push == 0 then return end
  redis.call('LPUSH', H.pending, unpack(H.push))
  redis.call('HINCRBY', H.meta, 'depth', -#H.push)
  for class, c in pairs(H.classes) do
    if class ~= 'default' and redis.call('HINCRBY', H.cdepth, class, -c) <= 0 then
      redis.call('HDEL', H.cdepth, class)
    end
  end
  -- An id is almost always counted once: delete those in one call. Ids
  -- the producers chose are not recorded (queue_enqueue.lua): with none
  -- recorded at all, as when no producer sets ids, there is nothing to
  -- look up.
  if (#H.keyed > 0 or #H.jobids > 0) and redis.call('HLEN', H.ids) > 0 then
    for _, task in ipairs(H.keyed) do
      H.jobids[#H.jobids + 1] = string.match(task, '^sluice:([^@]+)@')
    end
    local counts, gone = redis.call('HMGET', H.ids, unpack(H.jobids)), {}
    for i, id in ipairs(H.jobids) do
      if tonumber(counts[i] or '0') <= 1 then
        gone[#gone + 1] = id
      elseif redis.call('HINCRBY', H.ids, id, -1) <= 0 then
        redis.call('HDEL', H.ids, id)
      end
    end
    if #gone > 0 then redis.call('HDEL', H.ids, unpack(gone)) end
  end
  H.push, H.keyed, H.jobids, H.classes = {}, {}, {}, {}
end
