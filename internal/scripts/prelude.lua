-- Helpers shared by the scripts that are composed from several files
-- (see scripts.go). Defines no keys and reads no arguments.
-- int(x): x formatted as an integer; Lua's default %.14g would round a
--         microsecond timestamp.
-- ttl(us): a PEXPIRE argument for a lifetime of us µs: rounded up, >= 1.
-- clock(v): now in µs, and the extra TTL (ms) to give keys: v when v is
--         not empty (tests pass a time; their keys then live an hour
--         longer), else the server's TIME and 0.
-- share(s, c, t, now): a pacing bucket's adaptive share of its rate now,
--         in basis points (10000: the whole rate), and its ceiling, from
--         the fields s, c, t that throttle_pause.lua leaves at a
--         slow-down (nil: never slowed, the whole rate). After a
--         slow-down at t the share climbs back by SHARE_CLIMB a µs up to
--         the ceiling, and the ceiling by SHARE_CREEP a µs up to 10000.
-- paced(pr, share): the emission interval's numerator at that share.
-- guard_of(guard, rl, pr, burst): a bucket's guard (throttle.Limit.Guard,
--         µs) in 1/rl µs: none for a burst of 1, at most half the bucket.
local function int(x) return string.format('%d', x) end
local function ttl(us) if us <= 0 then return 1 end return math.ceil(us / 1000) end
local function clock(v)
  if v ~= nil and v ~= '' then return tonumber(v), 3600000 end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), 0
end
-- SHARE_MIN is throttle.minShare: refusals never step a share below it.
local SHARE_FULL, SHARE_MIN = 10000, 7500
local SHARE_CLIMB = 200 / 1000000   -- 2% of the rate a second
local SHARE_CREEP = 100 / 60000000  -- 1% of the rate a minute
local function share(s, c, t, now)
  if not t then return SHARE_FULL, SHARE_FULL end
  local dt = now - tonumber(t)
  if dt < 0 then dt = 0 end
  local cn = math.min(SHARE_FULL, tonumber(c) + dt * SHARE_CREEP)
  local sn = math.min(cn, tonumber(s) + dt * SHARE_CLIMB)
  return math.floor(sn), cn
end
local function guard_of(guard, rl, pr, burst)
  if burst <= 1 then return 0 end
  return math.min(guard * rl, math.floor(burst * pr / 2))
end
local function paced(pr, sh)
  if sh >= SHARE_FULL then return pr end
  return math.ceil(pr * SHARE_FULL / sh)
end
