-- common.lua: the functions every script shares. A script sent to the
-- server is this file, the other parts it needs, then its own file, each
-- without its header comment (cmake/tokenlock_redis_scripts.cmake lists
-- the parts of each script).
-- KEYS and ARGV: none of its own (the functions take the key they read).
--
-- A key the lock cannot use (another type, or a value the lock never
-- writes) is answered with
--   {-1, key, the value's first 100 bytes, its length, what is wrong}
-- and the client reports lock_corrupt: reading such a value as a number
-- would make fences stop increasing or wrap, and a grant without an owner
-- or an expiry would hold the lock forever.
--   fenceok(v): v is a fence as the lock writes it: 1 to 19 decimal digits
--     without a leading zero, at most 2^63 - 1 (what the client's reply
--     parsing and Redis's integers hold).
--   get(k): the string at k, false when none, or nil and the answer above
--     when k holds another type (GET would fail with WRONGTYPE).
--   parse(k, v): owner, fence (a string) of the grant v; nil and the
--     answer when v is not "<fence> <owner>" with the owner as
--     new_owner_id() makes it ("<host>-<hash8>.<pid>.<start>.<nonce16>").
--   grant(k): get and parse; false when free.
-- Only acquire's busy path, status and a lost grant's release parse a
-- grant: a release or refresh of our own compares the whole value.
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
