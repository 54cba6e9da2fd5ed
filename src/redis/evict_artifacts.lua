-- The eviction shared by put_artifact.lua and commit_artifacts.lua: the store sends each
-- of them with this file in front, as one script.
--
-- Evicts a session's least recently used artifacts that are not live while the session is
-- over max_n artifacts or max_bytes bytes; returns how many went. Live ids (the set at
-- `live`) are passed over, so the session may stay over its bounds.
local function evict(data, idx, meta, live, max_n, max_bytes)
  local count = redis.call('ZCARD', idx)
  local stored = redis.call('HGET', meta, 'bytes')
  local bytes = stored and tonumber(stored) or 0
  local evicted, skipped = 0, 0
  while count > max_n or bytes > max_bytes do
    -- The first `skipped` ranks are live ids passed over; each eviction shifts the rest
    -- down, so the next batch starts right after them.
    local batch = redis.call('ZRANGE', idx, skipped, skipped + 63)
    if #batch == 0 then
      break
    end
    for _, victim in ipairs(batch) do
      if count <= max_n and bytes <= max_bytes then
        break
      end
      if redis.call('SISMEMBER', live, victim) == 1 then
        skipped = skipped + 1
      else
        bytes = redis.call('HINCRBY', meta, 'bytes', -redis.call('HSTRLEN', data, victim))
        redis.call('HDEL', data, victim)
        redis.call('ZREM', idx, victim)
        count = count - 1
        evicted = evicted + 1
      end
    end
  end
  return evicted
end

