-- Admission by one algorithm: this file follows prelude.lua and one
-- algorithm's file, which defines admit().
-- KEYS[1]  the limited key's state (its shape depends on the algorithm)
-- ARGV     1 limit, 2 period (µs), 3 capacity (Burst or Limit), 4 rl, 5 pr
--          (the rate limit/period in lowest terms: rl units per pr µs),
--          6 cost, 7 "1" to consume or "0" to peek, 8 now in µs or "" for
--          the server's TIME
-- Returns  {allowed (1/0), remaining, reset after (µs), retry after (µs)}
-- admit() takes ARGV 1 to 5 as the strings they arrive as (so does
-- queue_enqueue.lua): each algorithm converts only the two or three it
-- uses, as a tonumber costs redis-server about 1,800 instructions.
local now, pad = clock(ARGV[8])
return admit(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
  tonumber(ARGV[6]), ARGV[7] == '1', now, pad)
