-- Helpers that count handed-over jobs out of the queue's depth once asynq
-- has given them to a worker: their task's state is then no longer
-- "pending" (queue_claim.lua, queue_reconcile.lua).
-- Defines no keys and reads no arguments: callers pass a table H of key
-- names as queue_handover.lua describes (handed, hinfo, meta, tdepth,
-- cdepth, ids, taskprefix).

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
