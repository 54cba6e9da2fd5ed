-- Stores one artifact and enforces the session's bounds, atomically. Sent after
-- evict_artifacts.lua, which defines `evict`.
-- KEYS: data (hash id -> artifact), idx (zset id -> last use), meta (hash: seq, bytes),
--       live (set: the ids the session's latest request refers to, never evicted)
-- ARGV: id, value, max artifacts, max bytes, ttl in ms
-- Returns how many artifacts were evicted.
local id, value = ARGV[1], ARGV[2]
local max_n, max_bytes, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]

-- Storing an id that is there replaces it (ids are content-addressed) and counts as a use.
local old = redis.call('HSTRLEN', KEYS[1], id)
redis.call('HSET', KEYS[1], id, value)
local seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
redis.call('ZADD', KEYS[2], seq, id)
redis.call('HINCRBY', KEYS[3], 'bytes', string.len(value) - old)

-- The artifact just stored is the most recent and the caller refuses one larger than
-- max_bytes, so it goes only when live ones leave it no room (as in the other stores).
local evicted = evict(KEYS[1], KEYS[2], KEYS[3], KEYS[4], max_n, max_bytes)

for i = 1, 4 do
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return evicted
