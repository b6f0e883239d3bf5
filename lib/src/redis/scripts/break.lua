-- break.lua: removes the grant of one named owner (tokenlock break), and
-- wakes a waiter; sent after common.lua, wake.lua, shared.lua and
-- leave.lua.
-- KEYS: the grant, :fence, :wake, :waiters, :handoff, :shared, :writer
-- (docs/redis.md, Keys).
-- ARGV[1]: the owner whose grant or share is removed; ARGV[2]: the wake
-- list's expiry (ms).
-- Answer: {1, owner} when removed; {0, the owner there or ''} when the
-- grant is another owner's (shared holders: the shared grant's owner id)
-- or there is none; common.lua's {-1, ...} for a key the lock cannot use.

local owner, fence = grant(KEYS[1])
if owner == nil then return fence end
if owner == shared_owner and redis.call('HEXISTS', KEYS[6], ARGV[1]) == 1 then
  local done, bad = leave(ARGV[1], ARGV[2], nowms())
  if done == nil then return bad end
  return {1, ARGV[1]}
end
if owner ~= ARGV[1] then return {0, owner or ''} end
redis.call('DEL', KEYS[1])
wake(ARGV[2])
return {1, owner}
