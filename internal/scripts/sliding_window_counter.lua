-- Sliding window counter admission: the previous fixed window's count,
-- weighted by how much of it the sliding window still covers, plus the
-- current window's count.
-- admit()   defined here, called by admit_main.lua or queue_enqueue.lua:
--           admit(key, limit, period µs, capacity, rl, pr, cost, consume,
--           now µs, extra TTL ms) -> {allowed (1/0), remaining, reset
--           after µs, retry after µs}
--           limit to pr arrive as strings (see admit_main.lua).
-- State     a string "w:c:p": w = current window index, c = its count,
--           p = the count of window w-1. Read with GET, written with one
--           SET PX.
-- The floating-point expressions are the ones algorithms/model.go
-- evaluates, in the same order, so both give identical decisions.
local function admit(key, limit, period, capacity, rl, pr, n, consume, now, pad)
  limit, period = tonumber(limit), tonumber(period)
  local w = math.floor(now / period)
  local cur, prev = 0, 0
  local s = redis.call('GET', key)
  if s then
    local i = string.find(s, ':', 1, true)
    local j = string.find(s, ':', i + 1, true)
    local sw = tonumber(string.sub(s, 1, i - 1))
    if sw == w then
      cur, prev = tonumber(string.sub(s, i + 1, j - 1)), tonumber(string.sub(s, j + 1))
    elseif sw == w - 1 then
      prev = tonumber(string.sub(s, i + 1, j - 1))
    elseif sw > w then -- the clock went back: decide at the start of the stored window
      w, cur, prev = sw, tonumber(string.sub(s, i + 1, j - 1)), tonumber(string.sub(s, j + 1))
      now = w * period
    end
  end
  local start = w * period
  local elapsed = now - start
  local weighted = prev * (period - elapsed) / period -- weight(prev, elapsed) below
  local allowed = weighted <= limit - cur - n
  if allowed and consume then
    cur = cur + n
    redis.call('SET', key, string.format('%d:%d:%d', w, cur, prev), 'PX', ttl(start + 2 * period - now) + pad)
  end
  local remaining = math.floor((limit - cur) - weighted)
  if remaining < 0 then remaining = 0 end
  local reset, retry = 0, 0
  if cur > 0 then
    reset = start + 2 * period - now
  elseif prev > 0 then
    reset = start + period - now
  end
  if not allowed then
    local function weight(p, e) return p * (period - e) / period end
    local function first_fit(p, room, from)
      local e = period - math.floor(room * period / p)
      if e < from then e = from end
      while e < period and weight(p, e) > room do e = e + 1 end
      while e > from and weight(p, e - 1) <= room do e = e - 1 end
      return e
    end
    if cur + n <= limit then
      retry = start + first_fit(prev, limit - cur - n, elapsed + 1) - now
    else
      retry = start + period + first_fit(cur, limit - n, 0) - now
    end
  end
  return {allowed and 1 or 0, remaining, reset, retry}
end
