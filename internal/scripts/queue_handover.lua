-- Helpers of the scripts that take jobs out of the waiting room for the
-- hand-over to asynq (queue_claim.lua, queue_take.lua). Defines no keys
-- and reads no arguments: callers pass a table H of names and settings,
-- all under the queue's hash tag, which is asynq's own:
--   H.ids        hash: scoped job id (tenant/id, queue.Job.ScopedID) ->
--                how many jobs of it are waiting; a task id holds it
--                (sluice:<scoped id>@<nonce>:<moves>)
--   H.held       sorted set: scoped job id -> until when (µs) it stays
--                refused, its job handed over and not started yet
--   H.hold       how long a hold lasts at most, µs
--   H.handing    sorted set: entries taken for the hand-over -> when
--                (µs) they were taken
--
-- A job is taken for the hand-over by moving its entry, as it is, from
-- its tenant's list to the handing set, and its recorded id from the ids
-- hash to the held set. No script writes asynq's keys: the dispatcher
-- (queue.Server.handOver) writes each taken job's task with asynq's own
-- Client, under the task id of the entry, then clears the entries from
-- the handing set (queue_handed.lua), which takes them out of the waiting
-- room's depth and class counts. Until then the bound counts them twice
-- (in the depth, and once written, in asynq's pending list): never less
-- than what waits. An entry left in the handing set by a dispatcher that
-- died is taken again by a later claim (queue_claim.lua), and written
-- again: asynq refuses a task id it holds, so that is done once.
-- Uses prelude.lua (int).

-- An entry (queue.entry; docs/queue.md, Entries) is a header line, then
-- the job's envelope (JSON), which no script reads:
--   sluice/2 TAB name=value TAB name=value ... LF envelope
-- The header begins with the marker sluice/2 and holds fields read by
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

-- read returns the task id and the class of an entry, and where its
-- header ends (for field), or nil for text that is no entry.
local function read(entry)
  local lf = string.find(entry, '\n', 1, true)
  if not lf or string.sub(entry, 1, 9) ~= 'sluice/2\t' then return nil end
  local class, task = field(entry, lf, '\tclass='), field(entry, lf, '\ttask=')
  if not class or class == '' or not task or string.sub(task, 1, 7) ~= 'sluice:'
    or string.byte(task, 8) == 64 or not string.find(task, '@', 9, true) then
    return nil
  end
  return task, class, lf
end

-- hand_over takes an entry that read has read (task its task id) for
-- the hand-over; flush(H) ends the batch. now is in µs.
local function hand_over(H, task, entry, now)
  if not H.push then
    H.push, H.tasks = {}, {}
    H.now = now
  end
  H.push[#H.push + 1] = int(now)
  H.push[#H.push + 1] = entry
  H.tasks[#H.tasks + 1] = task
end

-- flush writes what hand_over batched: the entries into the handing
-- set, and the ids, which leave the ids hash and are held instead until
-- the jobs start.
local function flush(H)
  if not H.push or #H.push == 0 then return end
  redis.call('ZADD', H.handing, unpack(H.push))
  -- An id is almost always counted once: delete those in one call. Ids
  -- the producers chose are not recorded (queue_enqueue.lua): with none
  -- recorded at all, as when no producer sets ids, there is nothing to
  -- look up.
  if redis.call('HLEN', H.ids) > 0 then
    local jobids = {}
    for _, task in ipairs(H.tasks) do
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
  H.push, H.tasks = {}, {}
end
