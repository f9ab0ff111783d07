-- Helpers shared by the scripts that are composed from several files
-- (see scripts.go). Defines no keys and reads no arguments.
-- int(x): x formatted as an integer; Lua's default %.14g would round a
--         microsecond timestamp.
-- ttl(us): a PEXPIRE argument for a lifetime of us µs: rounded up, >= 1.
-- clock(v): now in µs, and the extra TTL (ms) to give keys: v when v is
--         not empty (tests pass a time; their keys then live an hour
--         longer), else the server's TIME and 0.
local function int(x) return string.format('%d', x) end
local function ttl(us) if us <= 0 then return 1 end return math.ceil(us / 1000) end
local function clock(v)
  if v ~= nil and v ~= '' then return tonumber(v), 3600000 end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), 0
end
