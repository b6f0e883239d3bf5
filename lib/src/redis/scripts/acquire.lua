-- acquire.lua: one attempt to take the lock exclusively; sent after
-- common.lua, next_fence.lua, wake.lua and shared.lua.
-- KEYS: the grant, :fence, :wake, :waiters, :handoff, and (clients that
-- know shared holders) :shared, :writer (docs/redis.md, Keys).
-- ARGV[1]: the owner id; ARGV[2]: the lease (ms); ARGV[3]: the fence key's
-- expiry (ms); ARGV[4]: what came before this attempt ('0' nothing, '1' a
-- block that ran out, '2' a release's wake-up); ARGV[5]: how long to keep
-- the count of waiters when the caller is refused: '0' when it will not
-- wait (try_acquire, a spent budget) and is not counted, else until its
-- next attempt at the latest (ms); ARGV[6]: '1' when the caller has
-- marked the lock (an earlier attempt's 'marked'), so that its grant
-- removes its mark.
-- Answer: the fence alone for a fresh grant; {1, owner, fence, lease ms,
-- how far the clock is behind (us)} when ours, or granted with a clock
-- behind the last fence; {0, holder, fence, lease ms left, 0} when
-- refused ('', 0 and the hand-off's time left while a hand-off keeps the
-- lock), with a sixth element 'marked' when shared holders hold and the
-- caller's mark now bars new ones, 'mark' when another writer's does;
-- common.lua's {-1, ...} for a key the lock cannot use.
--
-- A free lock that a release is handing to the waiter it woke is refused
-- to every other caller, with the hand-off's remaining time as the "lease"
-- to block for: a newcomer cannot take the lock from under the woken
-- waiter, whose attempt ends the hand-off. Called with five keys (a client
-- that does not know shared holders), shared holders are a held grant.

if ARGV[4] ~= '0' and tonumber(redis.call('DECR', KEYS[4])) < 0 then redis.call('DEL', KEYS[4]) end
local function refuse(owner, fence, pttl, why)
  if ARGV[5] ~= '0' then
    redis.call('INCR', KEYS[4])
    if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[5]) then redis.call('PEXPIRE', KEYS[4], ARGV[5]) end
  end
  return {0, owner, fence, pttl, 0, why}
end
local owner, held, v = grant(KEYS[1])
if owner == nil then return held end
if owner == ARGV[1] then
  -- Ours already: this is a retry whose first reply was lost.
  return {1, owner, held, redis.call('PTTL', KEYS[1]), 0}
end
if owner then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then return corrupt(KEYS[1], v, 'persistent') end
  if owner ~= shared_owner or not KEYS[7] then return refuse(owner, held, pttl, '') end
  local mark, bad = get(KEYS[7])
  if mark == nil then return bad end
  local n
  n, bad = holders(nowms())
  if n == nil then return bad end
  if n > 0 then
    -- Mark (or keep marking): no shared holder joins from now on, and the
    -- last one out hands the lock to us (leave.lua).
    if mark and mark ~= ARGV[1] then return refuse(owner, held, pttl, 'mark') end
    if ARGV[5] == '0' then
      -- Not waiting (try_acquire, a spent budget): no mark of ours stays
      -- to keep shared holders out.
      if mark then redis.call('DEL', KEYS[7]) end
      return refuse(owner, held, pttl, '')
    end
    redis.call('SET', KEYS[7], ARGV[1], 'PX', ARGV[2])
    return refuse(owner, held, pttl, 'marked')
  end
  -- The grant outlived every shared lease (by less than a lease): free.
  redis.call('DEL', KEYS[1], KEYS[6])
end
local wait, handoff = kept(ARGV[1], ARGV[4] == '2', ARGV[2])
if wait == nil then return handoff end
if wait then return refuse('', 0, wait, '') end
local last, bad = get(KEYS[2])
if last == nil then return bad end
if last and not fenceok(last) then return corrupt(KEYS[2], last, 'fence') end
local fence, behind = nextfence(last)
if fence == nil then return behind end
if handoff then redis.call('DEL', KEYS[5]) end
if ARGV[6] == '1' and get(KEYS[7]) == ARGV[1] then redis.call('DEL', KEYS[7]) end
local f = type(fence) == 'string' and fence or string.format('%.0f', fence)
redis.call('SET', KEYS[1], f .. ' ' .. ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], f, 'PX', ARGV[3])
-- The common answer is the fence alone: an array costs the server more.
if behind == 0 then return fence end
return {1, ARGV[1], f, tonumber(ARGV[2]), behind}
