-- Token bucket admission, in exact integer arithmetic: tokens are counted
-- in units of 1/pr of a token, so one microsecond refills exactly rl units.
-- admit()   defined here, called by admit_main.lua or queue_enqueue.lua:
--           admit(key, limit, period µs, capacity, rl, pr, cost, consume,
--           now µs, extra TTL ms) -> {allowed (1/0), remaining, reset
--           after µs, retry after µs}
--           limit to pr arrive as strings (see admit_main.lua).
-- State     a string "t:l": t = tokens (in 1/pr units), l = time of that
--           count (µs). Read with GET, written with one SET PX.
local function admit(key, limit, period, capacity, rl, pr, n, consume, now, pad)
  capacity, rl, pr = tonumber(capacity), tonumber(rl), tonumber(pr)
  local full = capacity * pr
  local tokens = full
  local s = redis.call('GET', key)
  if s then
    local i = string.find(s, ':', 1, true)
    tokens = tonumber(string.sub(s, 1, i - 1))
    local last = tonumber(string.sub(s, i + 1))
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
    redis.call('SET', key, string.format('%d:%d', tokens, now), 'PX', ttl(math.ceil((full - tokens) / rl)) + pad)
  end
  local retry = 0
  if not allowed then retry = math.ceil((cost - tokens) / rl) end
  return {allowed and 1 or 0, math.floor(tokens / pr), math.ceil((full - tokens) / rl), retry}
end
