-- Helpers of the scripts that hand jobs from the waiting room to asynq
-- (queue_claim.lua, queue_take.lua). Defines no keys and reads no
-- arguments: callers pass a table H of names and settings, all under the
-- queue's hash tag, which is asynq's own:
--   H.meta       hash: depth (jobs in the waiting room)
--   H.cdepth     hash: jobs in the waiting room, by metrics class; the
--                default class is not counted (queue_enqueue.lua)
--   H.ids        hash: scoped job id (tenant/id, queue.Job.ScopedID) ->
--                how many jobs of it are waiting; a task id holds it
--                (sluice:<scoped id>@<nonce>:<moves>)
--   H.held       sorted set: scoped job id -> until when (µs) it stays
--                refused, its job handed over and not started yet
--   H.hold       how long a hold lasts at most, µs
--   H.pending    asynq:{Q}:pending
--   H.taskprefix asynq:{Q}:t:
--   H.retention  asynq's TaskMessage field Retention, encoded by the
--                worker ("" for none)
--
-- A job is handed over by writing its asynq task as asynq's
-- Client.Enqueue writes one: the hash asynq:{Q}:t:<task id> with msg
-- (asynq's TaskMessage), state "pending" and pending_since (ns), and the
-- task id pushed on the pending list. The entry holds the message ready
-- (queue.Job.item) but for the Retention field, which this appends: no
-- script encodes a message. The step that takes the job out of the
-- waiting room does it, so a job is never taken without being handed
-- over; it leaves the waiting room's counts (depth, class, id) in that
-- step too. From then on asynq's pending list holds it until a worker
-- takes it, and the bound counts it there; a recorded id moves from the
-- ids hash to the held set, where the worker ends its hold when the job
-- starts its call (queue.Server.release) or goes back to the waiting room
-- (queue_untake.lua), or H.hold after the hand-over at the latest.
-- Uses prelude.lua (int).

-- An entry (queue.entry; docs/queue.md, Entries) is a header line, then
-- asynq's TaskMessage of the job's task, which no script reads:
--   sluice/1 TAB name=value TAB name=value ... LF message
-- The header begins with the marker sluice/1 and holds fields read by
-- name, in any order (fields of other names are skipped; a name given
-- twice counts the first time); no value holds a tab or a newline:
--   class       the job's metrics class (required)
--   task        the task id, sluice:<scoped id>@<nonce>:<moves>, with at
--               least one character before '@' (required); the scoped id
--               (<tenant>/<id>, queue.Job.ScopedID) is the ids hash's key
--   downstream  the name of the job's throttle key, [A-Za-z0-9_.-]
--               (absent or empty: none)

-- field returns the value of a field of an entry's header, which ends at
-- lf: name is TAB, the field's name and '=' ('\tclass='); nil when the
-- header has no such field. Plain finds and an anchored match: no pattern
-- is tried at every position of the header.
local function field(entry, lf, name)
  local at = string.find(entry, name, 9, true)
  if not at or at > lf then return nil end
  return string.match(entry, '^[^\t\n]*', at + #name)
end

-- read returns the task id, the class and the message of an entry, and
-- where its header ends (for field), or nil for text that is no entry.
local function read(entry)
  local lf = string.find(entry, '\n', 1, true)
  if not lf or string.sub(entry, 1, 9) ~= 'sluice/1\t' then return nil end
  local class, task = field(entry, lf, '\tclass='), field(entry, lf, '\ttask=')
  if not class or class == '' or not task or string.sub(task, 1, 7) ~= 'sluice:'
    or string.byte(task, 8) == 64 or not string.find(task, '@', 9, true) then
    return nil
  end
  return task, class, string.sub(entry, lf + 1), lf
end

-- hand_over writes the job of an entry that read has read into asynq; it
-- leaves the waiting room's counts when flush(H) ends the batch. now is in
-- µs.
local function hand_over(H, task, class, msg, now)
  if not H.push then
    H.push, H.classes = {}, {}
    H.since = int(now) .. '000'
    H.now = now
  end
  redis.call('HSET', H.taskprefix .. task, 'msg', msg .. H.retention, 'state', 'pending', 'pending_since', H.since)
  H.push[#H.push + 1] = task
  H.classes[class] = (H.classes[class] or 0) + 1
end

-- flush writes what hand_over batched: the pending list's pushes, in
-- order (asynq dequeues from the other end), and the waiting room's
-- counts: the depth, the classes and the ids lose the jobs, and the ids
-- are held instead until the jobs start.
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
  if redis.call('HLEN', H.ids) > 0 then
    local jobids = {}
    for _, task in ipairs(H.push) do
      jobids[#jobids + 1] = string.match(task, '^sluice:([^@]+)@')
    end
    local counts, gone, held = redis.call('HMGET', H.ids, unpack(jobids)), {}, {}
    local expiry = int(H.now + H.hold)
    for i, id in ipairs(jobids) do
      if counts[i] then
        held[#held + 1] = expiry
        held[#held + 1] = id
      end
      if tonumber(counts[i] or '0') <= 1 then
        gone[#gone + 1] = id
      elseif redis.call('HINCRBY', H.ids, id, -1) <= 0 then
        redis.call('HDEL', H.ids, id)
      end
    end
    if #gone > 0 then redis.call('HDEL', H.ids, unpack(gone)) end
    if #held > 0 then
      redis.call('ZREMRANGEBYSCORE', H.held, '-inf', int(H.now))
      redis.call('ZADD', H.held, unpack(held))
    end
  end
  H.push, H.classes = {}, {}
end
