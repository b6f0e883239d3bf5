-- settle.lua: release or refresh of our grant; sent after common.lua and
-- wake.lua.
-- KEYS: the grant, :fence, :wake, :waiters, :handoff (docs/redis.md, Keys).
-- ARGV[1]: the owner id; ARGV[2]: the fence of our grant; ARGV[3]: the
-- wake list's expiry (release) or the new lease (refresh), ms; ARGV[4]:
-- 'release' or 'refresh'.
-- Answer: 1 when done; else why the grant is not ours, from the last fence
-- (compared as decimal strings: exact above 2^53): {0, 'taken', fence of
-- the grant there}, {0, 'newer', last fence}, {0, 'lost', last fence or 0}
-- (the server lost its state), {0, 'expired', last fence} (our lease
-- ended); common.lua's {-1, ...} for a key the lock cannot use.

local v, bad = get(KEYS[1])
if v == nil then return bad end
if v == ARGV[2] .. ' ' .. ARGV[1] then
  if ARGV[4] == 'release' then
    redis.call('DEL', KEYS[1])
    -- Only when someone waits: an uncontended cycle writes nothing more.
    wake(ARGV[3])
  else
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return 1
end
if v then
  local owner, held = parse(KEYS[1], v)
  if owner == nil then return held end
  return {0, 'taken', held}
end
local last
last, bad = get(KEYS[2])
if last == nil then return bad end
if not last then return {0, 'lost', 0} end
if not fenceok(last) then return corrupt(KEYS[2], last, 'fence') end
local mine = ARGV[2]
if #last > #mine or (#last == #mine and last > mine) then return {0, 'newer', last} end
if last ~= mine then return {0, 'lost', last} end
return {0, 'expired', last}
