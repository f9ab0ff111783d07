-- Sliding window log admission: one sorted-set member per admitted unit,
-- scored by its admission time.
-- admit()   defined here, called by admit_main.lua or queue_enqueue.lua:
--           admit(key, limit, period µs, capacity, rl, pr, cost, consume,
--           now µs, extra TTL ms) -> {allowed (1/0), remaining, reset
--           after µs, retry after µs}
--           limit to pr arrive as strings (see admit_main.lua).
-- State     a sorted set: members "<µs>:<sequence>", scored by admission time
local function admit(key, limit, period, capacity, rl, pr, n, consume, now, pad)
  limit, period = tonumber(limit), tonumber(period)
  -- Never decide at a time before the newest entry: members stay unique and
  -- the window never slides backwards.
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] then
    local t = tonumber(newest[2])
    if t > now then now = t end
  end
  local cut = now - period
  local live = '(' .. int(cut)
  if consume then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(cut))
  end
  local count = redis.call('ZCOUNT', key, live, '+inf')
  local allowed = count + n <= limit
  local retry = 0
  if not allowed then
    -- The oldest count+n-limit live entries must leave the window first.
    local e = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', count + n - limit - 1, 1)
    retry = tonumber(e[2]) + period - now
  end
  if allowed and consume then
    -- After the trim the set holds exactly count members, all older than or
    -- as old as now, so "<now>:<count+i>" is new.
    local stamp = int(now)
    local args = {}
    for i = 0, n - 1 do
      args[#args + 1] = stamp
      args[#args + 1] = stamp .. ':' .. int(count + i)
      if #args >= 200 or i == n - 1 then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    count = count + n
  end
  local reset = 0
  if allowed and consume then
    reset = period
  elseif count > 0 then
    reset = tonumber(newest[2]) + period - now
  end
  if allowed and consume then
    redis.call('PEXPIRE', key, ttl(reset) + pad)
  end
  return {allowed and 1 or 0, limit - count, reset, retry}
end
