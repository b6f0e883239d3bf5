-- settle_shared.lua: release or refresh of our share; sent after
-- common.lua, wake.lua, shared.lua and leave.lua.
-- KEYS: the grant, :fence, :wake, :waiters, :handoff, :shared, :writer
-- (docs/redis.md, Keys).
-- ARGV[1]: the owner id; ARGV[2]: 'release' or 'refresh'; ARGV[3]: the
-- wake list's expiry (release) or the new lease (refresh), ms.
-- Answer: 1 when done; {0, 'expired', fence} when our lease had ended (we
-- are removed: a release of the last share frees the lock), {0, 'taken',
-- fence} when a writer holds the lock, {0, 'lost', 0} when the server
-- lost the lock's state (no last fence); common.lua's {-1, ...} for a key
-- the lock cannot use.
--
-- A refresh extends our lease only, and raises the grant's expiry to it
-- when it is later (the cover rule). An ended lease is never renewed: a
-- slot holder whose lease ended may have been counted out, its slot
-- taken.

local owner, held = grant(KEYS[1])
if owner == nil then return held end
if owner and owner ~= shared_owner then return {0, 'taken', held} end
local e = redis.pcall('HGET', KEYS[6], ARGV[1])
if type(e) == 'table' then return corrupt(KEYS[6], '', 'type ' .. redis.call('TYPE', KEYS[6])['ok']) end
if not owner or not e then
  if owner or redis.call('EXISTS', KEYS[2]) == 1 then return {0, 'expired', held or 0} end
  return {0, 'lost', 0}
end
local now = nowms()
local ended = not string.find(e, '^%d+$') or tonumber(e) <= now
if ARGV[2] == 'refresh' and not ended then
  redis.call('HSET', KEYS[6], ARGV[1], string.format('%.0f', now + tonumber(ARGV[3])))
  cover(tonumber(ARGV[3]))
  return 1
end
local done, bad = leave(ARGV[1], ARGV[3], now)
if done == nil then return bad end
if ended then return {0, 'expired', held} end
return 1
