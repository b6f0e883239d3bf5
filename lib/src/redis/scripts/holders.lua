-- holders.lua: every holder of the lock, and a waiting writer's mark
-- (status); sent after common.lua, wake.lua and shared.lua.
-- KEYS[1]: the grant; KEYS[6]: :shared; KEYS[7]: :writer (KEYS[2] to
-- KEYS[5] are not read). ARGV: none.
-- Answer: {kind, fence, lease ms left, the mark's owner or '', its ms
-- left, the limit, how many holders, owner, ms left, owner, ms left, ...}:
-- kind 0 free (no holder follows), 1 held exclusively (one), 2 by shared
-- holders (at most the first 500 live ones follow: a reply's bound);
-- common.lua's {-1, ...} for a key the lock cannot use. Nothing is
-- written: holders whose lease ended are left out, not removed.

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
