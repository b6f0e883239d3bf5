-- shared.lua: shared holders and semaphores (docs/redis.md, Shared locks
-- and semaphores); uses common.lua and wake.lua.
-- KEYS[1]: the grant; KEYS[6]: the holders (a hash: owner -> the end of
-- its lease in ms by the server's TIME, and the field 'limit': the slot
-- count, 0 for readers); KEYS[7]: a waiting writer's mark (its owner id,
-- expiring with its lease).
--
-- While shared holders hold, the grant is "<fence> <shared_owner>" and
-- expires with the latest of their leases, so that a client that knows
-- only exclusive grants sees the lock held and waits. shared_owner is an
-- owner id of the form every version parses (no process has pid 0): such
-- a client neither reports the grant as corrupt nor judges it dead.
--   nowms(): the server's clock in ms.
--   holders(now): the live holders' count, the limit, and the earliest
--     end of a live lease; removes the holders whose lease ended; nil and
--     common.lua's answer when the hash holds what the lock never writes.
--   cover(ms): raises the grant's and the hash's expiry to ms at least.
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
