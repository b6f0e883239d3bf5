-- previous_acquire.lua: the acquire script of the version before shared
-- locks (0.2.0), as that version sends it (common.lua, next_fence.lua and
-- acquire.lua without their header comments), for the tests of what a
-- client of that version sees while shared holders hold. Never sent by
-- the library.
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

if ARGV[4] ~= '0' and tonumber(redis.call('DECR', KEYS[4])) < 0 then redis.call('DEL', KEYS[4]) end
local function refuse(owner, fence, pttl)
  if ARGV[5] ~= '0' then
    redis.call('INCR', KEYS[4])
    if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[5]) then redis.call('PEXPIRE', KEYS[4], ARGV[5]) end
  end
  return {0, owner, fence, pttl, 0}
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
  return refuse(owner, held, pttl)
end
if ARGV[4] ~= '2' then
  local handoff = redis.call('PTTL', KEYS[5])
  if handoff > 0 then return refuse('', 0, handoff) end
end
local last, bad = get(KEYS[2])
if last == nil then return bad end
if last and not fenceok(last) then return corrupt(KEYS[2], last, 'fence') end
local fence, behind = nextfence(last)
if fence == nil then return behind end
if ARGV[4] == '2' then redis.call('DEL', KEYS[5]) end
local f = type(fence) == 'string' and fence or string.format('%.0f', fence)
redis.call('SET', KEYS[1], f .. ' ' .. ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], f, 'PX', ARGV[3])
-- The common answer is the fence alone: an array costs the server more.
if behind == 0 then return fence end
return {1, ARGV[1], f, tonumber(ARGV[2]), behind}
