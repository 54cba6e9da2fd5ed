-- Reads one artifact, counting the read as a use for eviction and keeping the session.
-- KEYS: data, idx, meta, live (as in put_artifact.lua)
-- ARGV: id, ttl in ms
-- Returns the artifact, or nil.
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then
  return false
end
local seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
redis.call('ZADD', KEYS[2], 'XX', seq, ARGV[1])
-- The live set expires with the artifacts it protects, never before them.
for i = 1, 4 do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return value
