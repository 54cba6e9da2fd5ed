-- Reads one artifact, counting the read as a use for eviction and keeping the session.
-- KEYS: data, idx, meta, live (as in put_artifact.lua)
-- ARGV: id, ttl in ms, and '1' to ask only whether it is there (the same use, no text moved)
-- Returns the artifact (or 1 when only asked), or nil.
local value
if ARGV[3] == '1' then
  value = redis.call('HEXISTS', KEYS[1], ARGV[1])
  if value == 0 then
    return false
  end
else
  value = redis.call('HGET', KEYS[1], ARGV[1])
  if not value then
    return false
  end
end
local seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
redis.call('ZADD', KEYS[2], 'XX', seq, ARGV[1])
-- The live set expires with the artifacts it protects, never before them.
for i = 1, 4 do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return value
