-- Clear entries whose asynq tasks the dispatcher has written (or found
-- written: asynq refused their task ids) from the handing set, and take
-- them out of the waiting room's depth and class counts
-- (queue_handover.lua). An entry no longer in the set (another
-- dispatcher cleared it) counts nothing.
-- KEYS     1 handing set, 2 meta hash, 3 per-class count of waiting jobs
--          (the default class is not counted)
-- ARGV     each a pair: the entry, its metrics class
-- Returns  how many entries it cleared
local n, classes = 0, {}
for i = 1, #ARGV, 2 do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    n = n + 1
    classes[ARGV[i + 1]] = (classes[ARGV[i + 1]] or 0) + 1
  end
end
if n > 0 then redis.call('HINCRBY', KEYS[2], 'depth', -n) end
for class, c in pairs(classes) do
  if class ~= 'default' and redis.call('HINCRBY', KEYS[3], class, -c) <= 0 then
    redis.call('HDEL', KEYS[3], class)
  end
end
return n
