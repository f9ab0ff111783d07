-- Helpers that count handed-over jobs out of the queue's depth once asynq
-- has given them to a worker: their task's state is then no longer
-- "pending" (queue_claim.lua, queue_reconcile.lua).
-- Defines no keys and reads no arguments: callers pass a table H of key
-- names as queue_handover.lua describes (handover, meta, ids, taskprefix).

-- reconcile counts out the handed-over jobs that asynq has given to a
-- worker (or that were deleted or archived while pending), oldest first,
-- and stops at the first still pending: asynq dequeues its pending list in
-- the order of the pushes, which is the order of the entries. The job's
-- id leaves the queue with it.
-- Looks at no more than most jobs. Returns how many it counted out.
local function reconcile(H, most)
  local n = 0
  while n < most do
    local batch = redis.call('LRANGE', H.handover, 0, 31)
    if #batch == 0 then break end
    local out, ids = 0, {}
    for i, entry in ipairs(batch) do
      local _, _, task, id = string.find(entry, '^(%S+) (%S+)$')
      if task and redis.call('HGET', H.taskprefix .. task, 'state') == 'pending' then break end
      if task then ids[#ids + 1] = id end
      out = i
    end
    if out == 0 then break end
    redis.call('LTRIM', H.handover, out, -1)
    -- An id is almost always counted once: delete those in one call.
    if #ids > 0 then
      local counts, gone = redis.call('HMGET', H.ids, unpack(ids)), {}
      for i, id in ipairs(ids) do
        if tonumber(counts[i] or '0') <= 1 then
          gone[#gone + 1] = id
        elseif redis.call('HINCRBY', H.ids, id, -1) <= 0 then
          redis.call('HDEL', H.ids, id)
        end
      end
      if #gone > 0 then redis.call('HDEL', H.ids, unpack(gone)) end
    end
    n = n + #ids
    if out < #batch then break end
  end
  if n > 0 then redis.call('HINCRBY', H.meta, 'depth', -n) end
  return n
end
