-- acquire_shared.lua: one attempt to take a share of the lock (a reader,
-- or one of N slots); sent after common.lua, next_fence.lua, wake.lua
-- and shared.lua.
-- KEYS: the grant, :fence, :wake, :waiters, :handoff, :shared, :writer
-- (docs/redis.md, Keys).
-- ARGV[1] to ARGV[5]: as for acquire.lua (owner id, lease ms, the fence
-- key's expiry, what came before, how long to count the caller as a
-- waiter); ARGV[6]: the slot count (0: a reader, no limit).
-- Answer: {1, owner, fence of the shared grant, lease ms, how far the
-- clock is behind (us), 'shared', limit} when granted; {0, holder, fence,
-- lease ms left (full: of the earliest holder's lease), 0, why, the
-- holders' limit} when refused, why being
-- 'writer' (held exclusively), 'mark' (a writer waits: holder is its
-- owner id), 'limit' (shared holders of another slot count), 'full' (N
-- slot holders) or '' (kept for a woken waiter: holder '', fence 0);
-- common.lua's {-1, ...} for a key the lock cannot use.
--
-- A woken caller that gets a share passes its wake-up on while others
-- wait and room is left, so that the readers a writer kept out follow one
-- another in, one wake each, instead of waiting for their blocks to end.

if ARGV[4] ~= '0' and tonumber(redis.call('DECR', KEYS[4])) < 0 then redis.call('DEL', KEYS[4]) end
local function refuse(owner, fence, pttl, why, limit)
  if ARGV[5] ~= '0' then
    redis.call('INCR', KEYS[4])
    if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[5]) then redis.call('PEXPIRE', KEYS[4], ARGV[5]) end
  end
  return {0, owner, fence, pttl, 0, why, limit}
end
local lease, limit = tonumber(ARGV[2]), tonumber(ARGV[6])
local function granted(fence, n, behind, now)
  redis.call('HSET', KEYS[6], ARGV[1], string.format('%.0f', now + lease), 'limit', limit)
  cover(lease)
  if ARGV[4] == '2' and (limit == 0 or n + 1 < limit) then nudge(lease) end
  return {1, ARGV[1], fence, lease, behind, 'shared', limit}
end
local owner, held, v = grant(KEYS[1])
if owner == nil then return held end
local mark, bad = get(KEYS[7])
if mark == nil then return bad end
if owner then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then return corrupt(KEYS[1], v, 'persistent') end
  if owner ~= shared_owner then return refuse(owner, held, pttl, 'writer', 0) end
  if mark then return refuse(mark, held, pttl, 'mark', 0) end
  local now = nowms()
  local n, theirs, earliest = holders(now)
  if n == nil then return theirs end
  if n > 0 and theirs ~= limit then return refuse(owner, held, pttl, 'limit', theirs) end
  -- Full: a slot comes free by a release (which wakes us) or when the
  -- earliest lease ends, which is how long we block at most.
  if n > 0 and limit > 0 and n >= limit then return refuse(owner, held, earliest - now, 'full', theirs) end
  return granted(held, n, 0, now)
end
local wait, handoff = kept(ARGV[1], ARGV[4] == '2', ARGV[2])
if wait == nil then return handoff end
if wait then return refuse('', 0, wait, '', 0) end
if mark then
  -- Free, but a writer's mark (its shared holders' leases ended): it takes
  -- the lock at its next attempt. A wake-up that brought us here is passed
  -- on, so that it reaches that writer.
  if ARGV[4] == '2' then nudge(lease) end
  return refuse(mark, 0, redis.call('PTTL', KEYS[7]), 'mark', 0)
end
local last
last, bad = get(KEYS[2])
if last == nil then return bad end
if last and not fenceok(last) then return corrupt(KEYS[2], last, 'fence') end
local fence, behind = nextfence(last)
if fence == nil then return behind end
if handoff then redis.call('DEL', KEYS[5]) end
redis.call('DEL', KEYS[6])
local f = type(fence) == 'string' and fence or string.format('%.0f', fence)
redis.call('SET', KEYS[1], f .. ' ' .. shared_owner, 'PX', lease)
redis.call('SET', KEYS[2], f, 'PX', ARGV[3])
-- A fence with the clock not behind is the server's TIME (us): no second
-- TIME for the lease's end.
local now = type(fence) == 'number' and behind == 0 and math.floor(fence / 1000) or nowms()
return granted(f, 0, behind, now)
