-- leave.lua: a shared holder leaves (release, break); uses common.lua,
-- wake.lua and shared.lua, and KEYS[1] to KEYS[7] (docs/redis.md, Keys).
--
-- leave(owner, ttl, now): removes the holder `owner` (ttl: the wake
-- list's expiry, ms; now: the server's clock, ms). The last one out frees the lock, and hands it to the
-- writer whose mark bars new shared holders: the hand-off key then names
-- that writer, so that only its attempt takes the free lock (within the
-- hand-off's grace). A slot holder's leave wakes one waiter when no writer
-- waits (a slot came free); a reader's that is not the last wakes nobody
-- (nobody waits for one reader to leave). nil and common.lua's answer for
-- a key the lock cannot use.
local function leave(owner, ttl, now)
  -- Everything is read (and judged) before anything is written.
  local n, limit = holders(now)
  if n == nil then return nil, limit end
  local mark, bad = get(KEYS[7])
  if mark == nil then return nil, bad end
  -- A live holder leaves the count; one whose lease ended was not in it.
  if redis.call('HDEL', KEYS[6], owner) == 1 then n = n - 1 end
  if n > 0 then
    if limit > 0 and not mark then nudge(ttl) end
    return 1
  end
  redis.call('DEL', KEYS[1], KEYS[6])
  if not mark then
    wake(ttl)
    return 1
  end
  redis.call('DEL', KEYS[7])
  push(ttl)
  redis.call('SET', KEYS[5], mark, 'PX', 500)
  return 1
end
