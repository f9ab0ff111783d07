-- A key's circuit breaker (throttle.Throttle's circuits; docs/queue.md,
-- A failing downstream's circuit): closed (no hash), open until a time,
-- then half-open: one caller at a time is let through as the probe, whose
-- success closes the circuit and whose failure opens it again for the
-- cool-down.
-- KEYS[1]  the circuit's hash: u, open until (µs); p, the probe's lease
--          until (µs; absent: no probe out)
-- ARGV     1 op: "check" (may a call go now?), "fail" (a call failed),
--          "ok" (a call succeeded); 2 for "fail": "1" when the caller
--          counted the key's limit of consecutive failures, which opens a
--          closed circuit; 3 the cool-down (µs); 4 now in µs or "" for
--          TIME
-- Uses     prelude.lua (int, ttl, clock)
-- Returns  {state, wait (µs), changed}: state 0 closed, 1 open, 2
--          half-open with the probe out elsewhere, 3 half-open and this
--          caller is the probe; wait, for 1 and 2, until the end of the
--          open time or of the probe's lease; changed 1 when this call
--          opened the circuit (for "fail") or closed it (for "ok")
local key, op, cool = KEYS[1], ARGV[1], tonumber(ARGV[3])
local now, pad = clock(ARGV[4])
local st = redis.call('HMGET', key, 'u', 'p')
local u, p = tonumber(st[1] or '0'), tonumber(st[2] or '0')
local function open()
  redis.call('HSET', key, 'u', int(now + cool))
  redis.call('HDEL', key, 'p')
  redis.call('PEXPIRE', key, ttl(cool) + 3600000 + pad)
  return {1, cool, 1}
end
if op == 'ok' then
  if u == 0 then return {0, 0, 0} end
  redis.call('DEL', key)
  return {0, 0, 1}
end
if op == 'fail' then
  if u == 0 then
    if ARGV[2] == '1' then return open() end
    return {0, 0, 0}
  end
  -- The probe failed, or a call did after the cool-down: open again.
  if p > 0 or now >= u then return open() end
  return {1, u - now, 0}
end
-- check
if u == 0 then return {0, 0, 0} end
if now < u then return {1, u - now, 0} end
if p > now then return {2, p - now, 0} end
redis.call('HSET', key, 'p', int(now + cool))
redis.call('PEXPIRE', key, ttl(cool) + 3600000 + pad)
return {3, 0, 0}
