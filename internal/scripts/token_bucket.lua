-- Token bucket admission, in exact integer arithmetic: tokens are counted
-- in units of 1/pr of a token, so one microsecond refills exactly rl units.
-- admit()   defined here, called by admit_main.lua or queue_enqueue.lua:
--           admit(key, limit, period µs, capacity, rl, pr, cost, consume,
--           now µs, extra TTL ms) -> {allowed (1/0), remaining, reset
--           after µs, retry after µs}
-- State     a hash: t = tokens (in 1/pr units), l = time of that count (µs)
local function admit(key, limit, period, capacity, rl, pr, n, consume, now, pad)
  local full = capacity * pr
  local tokens = full
  local st = redis.call('HMGET', key, 't', 'l')
  if st[1] then
    tokens = tonumber(st[1])
    local last = tonumber(st[2])
    if now > last then
      -- Compare the idle time first, so that the product cannot grow large.
      if now - last >= math.ceil((full - tokens) / rl) then
        tokens = full
      else
        tokens = tokens + (now - last) * rl
      end
    else
      now = last -- the clock went back: decide at the stored time
    end
  end
  local cost = n * pr
  local allowed = tokens >= cost
  if allowed and consume then
    tokens = tokens - cost
    redis.call('HSET', key, 't', int(tokens), 'l', int(now))
    redis.call('PEXPIRE', key, ttl(math.ceil((full - tokens) / rl)) + pad)
  end
  local retry = 0
  if not allowed then retry = math.ceil((cost - tokens) / rl) end
  return {allowed and 1 or 0, math.floor(tokens / pr), math.ceil((full - tokens) / rl), retry}
end
