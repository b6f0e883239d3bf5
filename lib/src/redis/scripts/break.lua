-- break.lua: removes the grant of one named owner (tokenlock break), and
-- wakes a waiter; sent after common.lua and wake.lua.
-- KEYS: the grant, :fence, :wake, :waiters, :handoff (docs/redis.md, Keys).
-- ARGV[1]: the owner whose grant is removed; ARGV[2]: the wake list's
-- expiry (ms).
-- Answer: {1, owner} when removed; {0, the owner there or ''} when the
-- grant is another owner's or there is none; common.lua's {-1, ...} for a
-- key the lock cannot use.

local owner, fence = grant(KEYS[1])
if owner == nil then return fence end
if owner ~= ARGV[1] then return {0, owner or ''} end
redis.call('DEL', KEYS[1])
wake(ARGV[2])
return {1, owner}
