-- admit() for tenants without an admission policy: always admits, writes
-- nothing. Composed like the algorithms' files.
local function admit(key, limit, period, capacity, rl, pr, n, consume, now, pad)
  return {1, 0, 0, 0}
end
