-- The booking rule of a pacing bucket, for throttle_reserve.lua (its head
-- comment has the rule and the hash's fields). Defines no keys and reads no
-- arguments; now is in µs, guard is throttle.Limit.Guard in µs.
-- Uses     prelude.lua (int, share, paced, guard_of)

-- due(now, guard, rl, pr, burst, n, a, f, gf): a bucket's TAT before the
-- call (at, frac) from its stored a, f (nil: empty), its guard g in 1/rl
-- µs (none for a burst of 1, at most half the bucket), whether the call
-- is guarded (gf its stored g), and the delay until its own slot (µs).
local function due(now, guard, rl, pr, burst, n, a, f, gf)
  local at, frac, g, guarded = now, 0, guard_of(guard, rl, pr, burst), false
  if a then
    a, f = tonumber(a), tonumber(f)
    if a >= now then at, frac = a, f end
    -- guarded until the bucket has been empty for the guard
    guarded = g > 0 and gf == '1' and (a - now) * rl + f + g > 0
  end
  -- the new TAT - now, less the tolerance, in 1/rl µs
  local early = (at - now) * rl + frac + n * pr - burst * pr
  -- a call that must wait for room is guarded too: it is the one that
  -- fills the bucket when it fills slowly
  if g > 0 and early > 0 then guarded = true end
  if guarded then early = early + g end
  if early > 0 then return at, frac, g, guarded, math.ceil(early / rl) end
  return at, frac, g, guarded, 0
end

-- book(now, slot, delay, ...): the bucket's TAT after booking n units at
-- the call's slot, its g field (nil when it has no guard) and how long
-- (µs) the booking needs the key to live. A bucket whose own delay d is
-- below the call's (its slot rounds up to the call's) books from
-- max(TAT, slot).
local function book(now, slot, delay, rl, pr, burst, n, at, frac, g, guarded, d)
  if d < delay and at < slot then at, frac = slot, 0 end
  local f = frac + n * pr
  at = at + math.floor(f / rl)
  frac = f % rl
  local gv
  if g > 0 then
    -- guarded from the booking that leaves the bucket within G of full
    gv = '0'
    if guarded or (at - slot) * rl + frac > burst * pr - g then gv = '1' end
  end
  local l = at - now
  if frac > 0 then l = l + 1 end
  return at, frac, gv, l
end

-- renew(now, life, ceil, e): the key's new TTL (µs) if the booking
-- outlives the e it last set, else nil. What was learned lives until the
-- ceiling is back at the whole rate.
local function renew(now, life, ceil, e)
  if ceil < SHARE_FULL then life = math.max(life, (SHARE_FULL - ceil) / SHARE_CREEP) end
  if not e or tonumber(e) < now + life then return math.ceil(life * 1.5) end
  return nil
end

-- paused_for(now, p): how long the pause that ends at p (µs, nil: none)
-- has still to run.
local function paused_for(now, p)
  if p then
    p = tonumber(p)
    if p > now then return p - now end
  end
  return 0
end

-- reserve_one(key, rl, pr, burst, n, guard, maxwait, reserve, now, pad):
-- throttle_reserve.lua for a bucket of its own that learns
-- nothing, the common case, on locals, with no table but its reply (as
-- that script's). pad is clock()'s extra TTL (ms).
local function reserve_one(key, rl, pr, burst, n, guard, maxwait, reserve, now, pad)
  local st = redis.call('HMGET', key, 'p', 's', 'c', 't', 'e', 'a', 'f', 'g')
  local paused = paused_for(now, st[1])
  local sh, ceil = share(st[2], st[3], st[4], now)
  pr = paced(pr, sh)
  local at, frac, g, guarded, delay = due(now, guard, rl, pr, burst, n, st[6], st[7], st[8])
  local r = {1, delay, 0, paused, 0, 0, pr, sh, math.floor(ceil * 100), now + delay, n, 0}
  if delay > maxwait then
    r[1], r[3] = 0, delay - maxwait
    return r
  end
  if not reserve then return r end
  local gv, l
  at, frac, gv, l = book(now, now + delay, delay, rl, pr, burst, n, at, frac, g, guarded, delay)
  r[5], r[6] = at, frac
  local life = renew(now, math.max(paused, l), ceil, st[5])
  if life then
    if gv then
      redis.call('HSET', key, 'a', int(at), 'f', int(frac), 'g', gv, 'e', int(now + life))
    else
      redis.call('HSET', key, 'a', int(at), 'f', int(frac), 'e', int(now + life))
    end
    redis.call('PEXPIRE', key, math.ceil(life / 1000) + 1 + pad)
  elseif gv then
    redis.call('HSET', key, 'a', int(at), 'f', int(frac), 'g', gv)
  else
    redis.call('HSET', key, 'a', int(at), 'f', int(frac))
  end
  return r
end
