-- GCRA admission (the leaky bucket as a meter), in exact integer
-- arithmetic: the theoretical arrival time is TAT = a + f/rl µs with
-- 0 <= f < rl, and one unit's emission interval is pr/rl µs.
-- admit()   defined here, called by admit_main.lua or queue_enqueue.lua:
--           admit(key, limit, period µs, capacity, rl, pr, cost, consume,
--           now µs, extra TTL ms) -> {allowed (1/0), remaining, reset
--           after µs, retry after µs}
--           limit to pr arrive as strings (see admit_main.lua).
-- State     a string: "a:f" as above, or "a" alone when f = 0 (Redis then
--           keeps it as an integer). Read with GET, written with one SET
--           PX.
local function admit(key, limit, period, capacity, rl, pr, n, consume, now, pad)
  capacity, rl, pr = tonumber(capacity), tonumber(rl), tonumber(pr)
  local full = capacity * pr -- the burst tolerance, in 1/rl µs
  local at, frac = now, 0
  local s = redis.call('GET', key)
  if s then
    local i = string.find(s, ':', 1, true)
    local a
    if i then a = tonumber(string.sub(s, 1, i - 1)) else a = tonumber(s) end
    if a >= now then
      at = a
      if i then frac = tonumber(string.sub(s, i + 1)) end
    end
  end
  local level = (at - now) * rl + frac -- TAT - now, in 1/rl µs
  local inc = n * pr
  local allowed = level + inc <= full
  if allowed and consume then
    local f = frac + inc
    at = at + math.floor(f / rl)
    frac = f % rl
    level = level + inc
    local v
    if frac == 0 then v = int(at) else v = string.format('%d:%d', at, frac) end
    redis.call('SET', key, v, 'PX', ttl(math.ceil(level / rl)) + pad)
  end
  local retry = 0
  if not allowed then retry = math.ceil((level + inc - full) / rl) end
  -- level exceeds full only if the clock stepped back
  return {allowed and 1 or 0, math.floor(math.max(full - level, 0) / pr), math.ceil(level / rl), retry}
end
