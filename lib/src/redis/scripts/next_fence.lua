-- next_fence.lua: the next fence, for acquire.lua; uses common.lua.
-- KEYS[2]: the last fence's key (named in the answer when it is refused).
--
-- Fences are the server's TIME in microseconds, or the last fence + 1 when
-- that is not larger: they keep increasing when the server loses every key
-- (its clock still runs forward), and are exact in Lua's doubles (< 2^53
-- until the year 2255). A last fence from 2^53 on is incremented as a
-- decimal string (a double would stop at 2^53), and one that cannot be
-- incremented below 2^63 is refused.
--   nextfence(last): the fence (a number, or a string from 2^53 on) and how
--     far the server's clock is behind the last fence (us); nil and the
--     answer when the last fence cannot be incremented.
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
