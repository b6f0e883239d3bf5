-- holder.lua: who holds the lock (status); sent after common.lua.
-- KEYS[1]: the grant. ARGV: none.
-- Answer: {0} when free; {1, owner, fence, lease ms left} when held;
-- common.lua's {-1, ...} for a key the lock cannot use, or a grant
-- without an expiry ('persistent').

local owner, fence, v = grant(KEYS[1])
if owner == nil then return fence end
if not owner then return {0} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then return corrupt(KEYS[1], v, 'persistent') end
return {1, owner, fence, pttl}
