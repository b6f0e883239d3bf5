<?php
/**
 * The Lua scripts of the Redis lock, byte for byte those of the C++ client
 * (lib/src/redis/scripts/*.lua, docs/redis.md): a PHP and a C++ process
 * then run the same script (the server caches it under the same SHA-1)
 * and meet on one lock. Keys: the grant, :fence, :wake, :waiters,
 * :handoff, :shared, :writer (only the grant for HOLDER); each .lua file
 * says what it does and its KEYS and ARGV. Written by
 * scripts/php-redis-scripts from those files: do not edit by hand (the
 * ctest test redis_scripts_php_current fails when this differs). The C++
 * client's break script is not here: the PHP module does not break locks.
 *
 * @internal
 */

declare(strict_types=1);

namespace Tokenlock\Redis;

final class Scripts
{
    public const ACQUIRE = <<<'LUA'
local function corrupt(k, v, why)
  return {-1, k, string.sub(v, 1, 100), #v, why}
end
local function fenceok(v)
  return (v == '0' or string.find(v, '^[1-9]%d*$') ~= nil) and
         (#v < 19 or (#v == 19 and v <= '9223372036854775807'))
end
local function get(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    return nil, corrupt(k, '', 'type ' .. redis.call('TYPE', k)['ok'])
  end
  return v
end
local function parse(k, v)
  local f, o = string.match(v, '^(%d+) ([%w_%-]+%-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]%.%d+%.%d+%.[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])$')
  if not f or not fenceok(f) then return nil, corrupt(k, v, 'grant') end
  return o, f
end
local function grant(k)
  local v, bad = get(k)
  if not v then return v, bad end
  local o, f = parse(k, v)
  return o, f, v
end
local function nextfence(last)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if not last then return now, 0 end
  local l = tonumber(last)
  if l < now then return now, 0 end
  -- A reply's integer must stay below 2^63: 1e18 us is 30,000 years.
  local behind = math.min(l - now + 1, 1e18)
  if l < 9007199254740991 then return l + 1, behind end
  local i = #last
  while i > 0 and string.byte(last, i) == 57 do i = i - 1 end
  local f
  if i == 0 then
    f = '1' .. string.rep('0', #last)
  else
    f = string.sub(last, 1, i - 1) .. string.char(string.byte(last, i) + 1) ..
        string.rep('0', #last - i)
  end
  if not fenceok(f) then return nil, corrupt(KEYS[2], last, 'largest') end
  return f, behind
end
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
local shared_owner = 'shared-00000000.0.0.0000000000000000'
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function holders(now)
  local t = redis.pcall('HGETALL', KEYS[6])
  if t['err'] then return nil, corrupt(KEYS[6], '', 'type ' .. redis.call('TYPE', KEYS[6])['ok']) end
  local n, limit, earliest, ended = 0, 0, 0, {}
  for i = 1, #t, 2 do
    local f, v = t[i], t[i + 1]
    if not string.find(v, '^%d+$') or #v > 15 then return nil, corrupt(KEYS[6], f .. ' ' .. v, 'holders') end
    local e = tonumber(v)
    if f == 'limit' then
      limit = e
    elseif e <= now then
      ended[#ended + 1] = f
    else
      n = n + 1
      if earliest == 0 or e < earliest then earliest = e end
    end
  end
  if #ended > 0 then redis.call('HDEL', KEYS[6], unpack(ended)) end
  return n, limit, earliest
end
local function cover(ms)
  for _, k in ipairs({KEYS[1], KEYS[6]}) do
    if redis.call('PTTL', k) < ms then redis.call('PEXPIRE', k, ms) end
  end
end
-- kept(me, woken, ttl): the hand-off's time left (ms) when it keeps the
-- free lock for another than `me` (woken: my BLPOP returned a release's
-- wake-up); else false, and whether a hand-off is there (the grant ends
-- it). A plain hand-off ('1') keeps the lock for whichever waiter was
-- woken; a last shared holder's keeps it for the writer it names
-- (leave.lua). A woken waiter refused for that writer passes its wake-up
-- on (ttl: the wake list's expiry, ms), so that the next BLPOP in the
-- line, the writer's before long, is answered.
local function kept(me, woken, ttl)
  local h, bad = get(KEYS[5])
  if h == nil then return nil, bad end
  if not h then return false, false end
  if h == me or (h == '1' and woken) then return false, true end
  local pttl = redis.call('PTTL', KEYS[5])
  if pttl <= 0 then return false, true end
  if woken and h ~= '1' then nudge(ttl) end
  return pttl
end

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

LUA;

    public const ACQUIRE_SHARED = <<<'LUA'
local function corrupt(k, v, why)
  return {-1, k, string.sub(v, 1, 100), #v, why}
end
local function fenceok(v)
  return (v == '0' or string.find(v, '^[1-9]%d*$') ~= nil) and
         (#v < 19 or (#v == 19 and v <= '9223372036854775807'))
end
local function get(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    return nil, corrupt(k, '', 'type ' .. redis.call('TYPE', k)['ok'])
  end
  return v
end
local function parse(k, v)
  local f, o = string.match(v, '^(%d+) ([%w_%-]+%-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]%.%d+%.%d+%.[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])$')
  if not f or not fenceok(f) then return nil, corrupt(k, v, 'grant') end
  return o, f
end
local function grant(k)
  local v, bad = get(k)
  if not v then return v, bad end
  local o, f = parse(k, v)
  return o, f, v
end
local function nextfence(last)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if not last then return now, 0 end
  local l = tonumber(last)
  if l < now then return now, 0 end
  -- A reply's integer must stay below 2^63: 1e18 us is 30,000 years.
  local behind = math.min(l - now + 1, 1e18)
  if l < 9007199254740991 then return l + 1, behind end
  local i = #last
  while i > 0 and string.byte(last, i) == 57 do i = i - 1 end
  local f
  if i == 0 then
    f = '1' .. string.rep('0', #last)
  else
    f = string.sub(last, 1, i - 1) .. string.char(string.byte(last, i) + 1) ..
        string.rep('0', #last - i)
  end
  if not fenceok(f) then return nil, corrupt(KEYS[2], last, 'largest') end
  return f, behind
end
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
local shared_owner = 'shared-00000000.0.0.0000000000000000'
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function holders(now)
  local t = redis.pcall('HGETALL', KEYS[6])
  if t['err'] then return nil, corrupt(KEYS[6], '', 'type ' .. redis.call('TYPE', KEYS[6])['ok']) end
  local n, limit, earliest, ended = 0, 0, 0, {}
  for i = 1, #t, 2 do
    local f, v = t[i], t[i + 1]
    if not string.find(v, '^%d+$') or #v > 15 then return nil, corrupt(KEYS[6], f .. ' ' .. v, 'holders') end
    local e = tonumber(v)
    if f == 'limit' then
      limit = e
    elseif e <= now then
      ended[#ended + 1] = f
    else
      n = n + 1
      if earliest == 0 or e < earliest then earliest = e end
    end
  end
  if #ended > 0 then redis.call('HDEL', KEYS[6], unpack(ended)) end
  return n, limit, earliest
end
local function cover(ms)
  for _, k in ipairs({KEYS[1], KEYS[6]}) do
    if redis.call('PTTL', k) < ms then redis.call('PEXPIRE', k, ms) end
  end
end
-- kept(me, woken, ttl): the hand-off's time left (ms) when it keeps the
-- free lock for another than `me` (woken: my BLPOP returned a release's
-- wake-up); else false, and whether a hand-off is there (the grant ends
-- it). A plain hand-off ('1') keeps the lock for whichever waiter was
-- woken; a last shared holder's keeps it for the writer it names
-- (leave.lua). A woken waiter refused for that writer passes its wake-up
-- on (ttl: the wake list's expiry, ms), so that the next BLPOP in the
-- line, the writer's before long, is answered.
local function kept(me, woken, ttl)
  local h, bad = get(KEYS[5])
  if h == nil then return nil, bad end
  if not h then return false, false end
  if h == me or (h == '1' and woken) then return false, true end
  local pttl = redis.call('PTTL', KEYS[5])
  if pttl <= 0 then return false, true end
  if woken and h ~= '1' then nudge(ttl) end
  return pttl
end

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

LUA;

    public const SETTLE = <<<'LUA'
local function corrupt(k, v, why)
  return {-1, k, string.sub(v, 1, 100), #v, why}
end
local function fenceok(v)
  return (v == '0' or string.find(v, '^[1-9]%d*$') ~= nil) and
         (#v < 19 or (#v == 19 and v <= '9223372036854775807'))
end
local function get(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    return nil, corrupt(k, '', 'type ' .. redis.call('TYPE', k)['ok'])
  end
  return v
end
local function parse(k, v)
  local f, o = string.match(v, '^(%d+) ([%w_%-]+%-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]%.%d+%.%d+%.[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])$')
  if not f or not fenceok(f) then return nil, corrupt(k, v, 'grant') end
  return o, f
end
local function grant(k)
  local v, bad = get(k)
  if not v then return v, bad end
  local o, f = parse(k, v)
  return o, f, v
end
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

LUA;

    public const SETTLE_SHARED = <<<'LUA'
local function corrupt(k, v, why)
  return {-1, k, string.sub(v, 1, 100), #v, why}
end
local function fenceok(v)
  return (v == '0' or string.find(v, '^[1-9]%d*$') ~= nil) and
         (#v < 19 or (#v == 19 and v <= '9223372036854775807'))
end
local function get(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    return nil, corrupt(k, '', 'type ' .. redis.call('TYPE', k)['ok'])
  end
  return v
end
local function parse(k, v)
  local f, o = string.match(v, '^(%d+) ([%w_%-]+%-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]%.%d+%.%d+%.[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])$')
  if not f or not fenceok(f) then return nil, corrupt(k, v, 'grant') end
  return o, f
end
local function grant(k)
  local v, bad = get(k)
  if not v then return v, bad end
  local o, f = parse(k, v)
  return o, f, v
end
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
local shared_owner = 'shared-00000000.0.0.0000000000000000'
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function holders(now)
  local t = redis.pcall('HGETALL', KEYS[6])
  if t['err'] then return nil, corrupt(KEYS[6], '', 'type ' .. redis.call('TYPE', KEYS[6])['ok']) end
  local n, limit, earliest, ended = 0, 0, 0, {}
  for i = 1, #t, 2 do
    local f, v = t[i], t[i + 1]
    if not string.find(v, '^%d+$') or #v > 15 then return nil, corrupt(KEYS[6], f .. ' ' .. v, 'holders') end
    local e = tonumber(v)
    if f == 'limit' then
      limit = e
    elseif e <= now then
      ended[#ended + 1] = f
    else
      n = n + 1
      if earliest == 0 or e < earliest then earliest = e end
    end
  end
  if #ended > 0 then redis.call('HDEL', KEYS[6], unpack(ended)) end
  return n, limit, earliest
end
local function cover(ms)
  for _, k in ipairs({KEYS[1], KEYS[6]}) do
    if redis.call('PTTL', k) < ms then redis.call('PEXPIRE', k, ms) end
  end
end
-- kept(me, woken, ttl): the hand-off's time left (ms) when it keeps the
-- free lock for another than `me` (woken: my BLPOP returned a release's
-- wake-up); else false, and whether a hand-off is there (the grant ends
-- it). A plain hand-off ('1') keeps the lock for whichever waiter was
-- woken; a last shared holder's keeps it for the writer it names
-- (leave.lua). A woken waiter refused for that writer passes its wake-up
-- on (ttl: the wake list's expiry, ms), so that the next BLPOP in the
-- line, the writer's before long, is answered.
local function kept(me, woken, ttl)
  local h, bad = get(KEYS[5])
  if h == nil then return nil, bad end
  if not h then return false, false end
  if h == me or (h == '1' and woken) then return false, true end
  local pttl = redis.call('PTTL', KEYS[5])
  if pttl <= 0 then return false, true end
  if woken and h ~= '1' then nudge(ttl) end
  return pttl
end
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

LUA;

    public const HOLDER = <<<'LUA'
local function corrupt(k, v, why)
  return {-1, k, string.sub(v, 1, 100), #v, why}
end
local function fenceok(v)
  return (v == '0' or string.find(v, '^[1-9]%d*$') ~= nil) and
         (#v < 19 or (#v == 19 and v <= '9223372036854775807'))
end
local function get(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    return nil, corrupt(k, '', 'type ' .. redis.call('TYPE', k)['ok'])
  end
  return v
end
local function parse(k, v)
  local f, o = string.match(v, '^(%d+) ([%w_%-]+%-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]%.%d+%.%d+%.[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])$')
  if not f or not fenceok(f) then return nil, corrupt(k, v, 'grant') end
  return o, f
end
local function grant(k)
  local v, bad = get(k)
  if not v then return v, bad end
  local o, f = parse(k, v)
  return o, f, v
end

local owner, fence, v = grant(KEYS[1])
if owner == nil then return fence end
if not owner then return {0} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then return corrupt(KEYS[1], v, 'persistent') end
return {1, owner, fence, pttl}

LUA;

    public const HOLDERS = <<<'LUA'
local function corrupt(k, v, why)
  return {-1, k, string.sub(v, 1, 100), #v, why}
end
local function fenceok(v)
  return (v == '0' or string.find(v, '^[1-9]%d*$') ~= nil) and
         (#v < 19 or (#v == 19 and v <= '9223372036854775807'))
end
local function get(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    return nil, corrupt(k, '', 'type ' .. redis.call('TYPE', k)['ok'])
  end
  return v
end
local function parse(k, v)
  local f, o = string.match(v, '^(%d+) ([%w_%-]+%-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]%.%d+%.%d+%.[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])$')
  if not f or not fenceok(f) then return nil, corrupt(k, v, 'grant') end
  return o, f
end
local function grant(k)
  local v, bad = get(k)
  if not v then return v, bad end
  local o, f = parse(k, v)
  return o, f, v
end
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
local shared_owner = 'shared-00000000.0.0.0000000000000000'
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function holders(now)
  local t = redis.pcall('HGETALL', KEYS[6])
  if t['err'] then return nil, corrupt(KEYS[6], '', 'type ' .. redis.call('TYPE', KEYS[6])['ok']) end
  local n, limit, earliest, ended = 0, 0, 0, {}
  for i = 1, #t, 2 do
    local f, v = t[i], t[i + 1]
    if not string.find(v, '^%d+$') or #v > 15 then return nil, corrupt(KEYS[6], f .. ' ' .. v, 'holders') end
    local e = tonumber(v)
    if f == 'limit' then
      limit = e
    elseif e <= now then
      ended[#ended + 1] = f
    else
      n = n + 1
      if earliest == 0 or e < earliest then earliest = e end
    end
  end
  if #ended > 0 then redis.call('HDEL', KEYS[6], unpack(ended)) end
  return n, limit, earliest
end
local function cover(ms)
  for _, k in ipairs({KEYS[1], KEYS[6]}) do
    if redis.call('PTTL', k) < ms then redis.call('PEXPIRE', k, ms) end
  end
end
-- kept(me, woken, ttl): the hand-off's time left (ms) when it keeps the
-- free lock for another than `me` (woken: my BLPOP returned a release's
-- wake-up); else false, and whether a hand-off is there (the grant ends
-- it). A plain hand-off ('1') keeps the lock for whichever waiter was
-- woken; a last shared holder's keeps it for the writer it names
-- (leave.lua). A woken waiter refused for that writer passes its wake-up
-- on (ttl: the wake list's expiry, ms), so that the next BLPOP in the
-- line, the writer's before long, is answered.
local function kept(me, woken, ttl)
  local h, bad = get(KEYS[5])
  if h == nil then return nil, bad end
  if not h then return false, false end
  if h == me or (h == '1' and woken) then return false, true end
  local pttl = redis.call('PTTL', KEYS[5])
  if pttl <= 0 then return false, true end
  if woken and h ~= '1' then nudge(ttl) end
  return pttl
end

local owner, fence, v = grant(KEYS[1])
if owner == nil then return fence end
local mark, bad = get(KEYS[7])
if mark == nil then return bad end
local mttl = mark and redis.call('PTTL', KEYS[7]) or 0
if not owner then return {0, 0, 0, mark or '', mttl, 0, 0} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then return corrupt(KEYS[1], v, 'persistent') end
if owner ~= shared_owner then return {1, fence, pttl, mark or '', mttl, 0, 1, owner, pttl} end
local t = redis.pcall('HGETALL', KEYS[6])
if t['err'] then return corrupt(KEYS[6], '', 'type ' .. redis.call('TYPE', KEYS[6])['ok']) end
local now = nowms()
local out = {2, fence, pttl, mark or '', mttl, 0, 0}
for i = 1, #t, 2 do
  local f, e = t[i], tonumber(t[i + 1])
  if not string.find(t[i + 1], '^%d+$') then return corrupt(KEYS[6], f .. ' ' .. t[i + 1], 'holders') end
  if f == 'limit' then
    out[6] = e
  elseif e > now then
    out[7] = out[7] + 1
    if out[7] <= 500 then
      out[#out + 1] = f
      out[#out + 1] = e - now
    end
  end
end
return out

LUA;
}
