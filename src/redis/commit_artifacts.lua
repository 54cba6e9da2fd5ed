-- Stores what one request displaced, makes the ids it refers to the session's live set
-- and enforces the session's bounds around it, atomically. Sent after
-- evict_artifacts.lua, which defines `evict`.
-- KEYS: data, idx, meta, live (as in put_artifact.lua)
-- ARGV: max artifacts, max bytes, ttl in ms, n (the new artifacts), then n pairs of id
--       and value, then every id the request refers to
-- Returns the referenced ids the session does not hold afterwards, in their order.
local max_n, max_bytes, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local n = tonumber(ARGV[4])
local first_ref = 5 + 2 * n

-- The request's references replace the previous request's, stored or not: an id the
-- caller stores later by a plain put is protected too.
redis.call('DEL', KEYS[4])
local i = first_ref
while i <= #ARGV do
  -- SADD in slices: unpack has a limit on how many values it returns.
  local last = math.min(i + 999, #ARGV)
  redis.call('SADD', KEYS[4], unpack(ARGV, i, last))
  i = last + 1
end

-- As in put_artifact.lua: an id that is there is replaced by the same text, and used.
for j = 0, n - 1 do
  local id, value = ARGV[5 + 2 * j], ARGV[6 + 2 * j]
  local old = redis.call('HSTRLEN', KEYS[1], id)
  redis.call('HSET', KEYS[1], id, value)
  local seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
  redis.call('ZADD', KEYS[2], seq, id)
  redis.call('HINCRBY', KEYS[3], 'bytes', string.len(value) - old)
end

evict(KEYS[1], KEYS[2], KEYS[3], KEYS[4], max_n, max_bytes)

-- Every reference held is a use, in the request's order: once the next request drops
-- them, they are the most recent of the artifacts that may go.
local missing = {}
for k = first_ref, #ARGV do
  local id = ARGV[k]
  if redis.call('HEXISTS', KEYS[1], id) == 1 then
    local seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
    redis.call('ZADD', KEYS[2], 'XX', seq, id)
  else
    missing[#missing + 1] = id
  end
end

for k = 1, 4 do
  redis.call('PEXPIRE', KEYS[k], ttl)
end
return missing
