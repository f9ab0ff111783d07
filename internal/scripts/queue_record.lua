-- Forget the jobs hash's records (queue_enqueue.lua writes them,
-- queue_untake.lua points them at a put-back job's new task id; see
-- queue/inspect.go) of jobs that completed: a record of the same job as
-- the one given (the same nonce: its hand-over <nonce>:<moves> less the
-- moves) goes; a record of another job of that id (enqueued since, which
-- wrote its own) is left alone.
-- A tenant's sequence (the jobs hash's field <tenant>) goes with the
-- record of its last job forgotten while it has none waiting, so that an
-- idle queue keeps nothing of its tenants.
-- KEYS     1 jobs hash (scoped id -> "<nonce>:<moves> <seq> <due µs>"), 2
--          per-tenant count of jobs for later
-- ARGV     1 "forget", 2 the prefix of the tenants' list
--          keys, then pairs of scoped id and <nonce>:<moves>
-- Returns  how many records changed
local function job(hand) return string.match(hand, '^([^:]*):') end
local changed = 0
for i = 3, #ARGV - 1, 2 do
  local rec = redis.call('HGET', KEYS[1], ARGV[i])
  if rec then
    local sp = string.find(rec, ' ', 1, true)
    if sp and job(string.sub(rec, 1, sp - 1)) == job(ARGV[i + 1]) then
      redis.call('HDEL', KEYS[1], ARGV[i])
      local t = string.match(ARGV[i], '^([^/]*)/')
      if t and redis.call('LLEN', ARGV[2] .. t) == 0 and redis.call('HEXISTS', KEYS[2], t) == 0 then
        redis.call('HDEL', KEYS[1], t)
      end
      changed = changed + 1
    end
  end
end
return changed
