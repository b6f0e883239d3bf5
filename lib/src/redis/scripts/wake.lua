-- wake.lua: wakes one waiter, for every script that may (the scripts'
-- parts: cmake/tokenlock_redis_scripts.cmake); uses KEYS[3] (the wake
-- list), KEYS[4] (the count of waiters), KEYS[5] (the hand-off).
--
-- push(ttl): one element on the wake list, for the next BLPOP (ttl: the
-- list's expiry, ms); at most 64 are kept.
-- nudge(ttl): when anyone waits, one element on the wake list for its
-- BLPOP (ttl: the list's expiry, ms); true when pushed.
-- wake(ttl): nudge, and the hand-off that keeps the free lock for the
-- waiter it wakes. The hand-off lasts 500 ms: the woken waiter's next
-- attempt comes a round trip after the release, but a loaded machine may
-- not run it for tens of milliseconds, and a newcomer that takes the lock
-- meanwhile sends it back to the end of the line (docs/redis.md,
-- "Hand-off"). It is also how long the lock stays free when the woken
-- waiter dies before its attempt.
local function push(ttl)
  redis.call('RPUSH', KEYS[3], '1')
  redis.call('LTRIM', KEYS[3], -64, -1)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
local function nudge(ttl)
  if tonumber(redis.call('GET', KEYS[4]) or '0') <= 0 then return false end
  push(ttl)
  return true
end
local function wake(ttl)
  if nudge(ttl) then redis.call('SET', KEYS[5], '1', 'PX', 500) end
end
