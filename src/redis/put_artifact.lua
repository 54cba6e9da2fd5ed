-- Stores one artifact and enforces the session's bounds, atomically.
-- KEYS: data (hash id -> artifact), idx (zset id -> last use), meta (hash: seq, bytes)
-- ARGV: id, value, max artifacts, max bytes, ttl in ms
-- Returns how many artifacts were evicted.
local id, value = ARGV[1], ARGV[2]
local max_n, max_bytes, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]

-- Storing an id that is there replaces it (ids are content-addressed) and counts as a use.
local old = redis.call('HSTRLEN', KEYS[1], id)
redis.call('HSET', KEYS[1], id, value)
local seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
redis.call('ZADD', KEYS[2], seq, id)
local bytes = redis.call('HINCRBY', KEYS[3], 'bytes', string.len(value) - old)

-- Least recently used first; the artifact just stored is the most recent, and the caller
-- refuses one larger than max_bytes, so it is never evicted here.
local count = redis.call('ZCARD', KEYS[2])
local evicted = 0
while count > max_n or (bytes > max_bytes and count > 1) do
  local victim = redis.call('ZPOPMIN', KEYS[2])[1]
  bytes = redis.call('HINCRBY', KEYS[3], 'bytes', -redis.call('HSTRLEN', KEYS[1], victim))
  redis.call('HDEL', KEYS[1], victim)
  count = count - 1
  evicted = evicted + 1
end

for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return evicted
