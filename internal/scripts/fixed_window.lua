-- Fixed window admission.
-- admit()   defined here, called by admit_main.lua or queue_enqueue.lua:
--           admit(key, limit, period µs, capacity, rl, pr, cost, consume,
--           now µs, extra TTL ms) -> {allowed (1/0), remaining, reset
--           after µs, retry after µs}
--           limit to pr arrive as strings (see admit_main.lua).
-- State     a string "w:c": w = window index (now / period), c = units
--           admitted in it. Read with GET, written with one SET PX.
local function admit(key, limit, period, capacity, rl, pr, n, consume, now, pad)
  limit, period = tonumber(limit), tonumber(period)
  local w = math.floor(now / period)
  local count = 0
  local s = redis.call('GET', key)
  if s then
    local i = string.find(s, ':', 1, true)
    local sw = tonumber(string.sub(s, 1, i - 1))
    if sw == w then
      count = tonumber(string.sub(s, i + 1))
    elseif sw > w then -- the clock went back: stay in the stored window
      w, count = sw, tonumber(string.sub(s, i + 1))
    end
  end
  local stop = (w + 1) * period
  local allowed = count + n <= limit
  if allowed and consume then
    count = count + n
    redis.call('SET', key, string.format('%d:%d', w, count), 'PX', ttl(stop - now) + pad)
  end
  local reset, retry = 0, 0
  if count > 0 then reset = stop - now end
  if not allowed then retry = stop - now end
  return {allowed and 1 or 0, limit - count, reset, retry}
end
