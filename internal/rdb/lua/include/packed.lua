--- @include "codes"
-- Packed tasks. A task written by a bulk load waits without a hash of its
-- own: its payload is a field of a hash shared by the tasks whose ids differ
-- only in their last three characters (loaded ids are xids, whose last
-- characters hold a line number, so about 2,000 consecutive lines share one
-- hash). The take that pops such an id (or a cancel, or a bulk cancel) makes
-- the task's hash from that field and deletes the field, so a task that ran
-- looks like any other. A task hash and a packed field never both exist for
-- one id. Ten million waiting tasks are so tens of thousands of keys, not
-- ten million.
--
-- packed_split splits id into the part that names its packed hash and its
-- field: all but its last 3 characters, and those (an id of 3 characters or
-- fewer: '' and the whole id). Go computes the same (QueueKeys.Packed).
local function packed_split(id)
  local n = #id
  if n > 3 then
    return string.sub(id, 1, n - 3), string.sub(id, n - 2)
  end
  return '', id
end

-- packed_base is the prefix of the tag's packed hashes (<ns>:{T}:lb:), from
-- its task prefix (<ns>:{T}:t:).
local function packed_base(tprefix)
  return string.sub(tprefix, 1, #tprefix - 2) .. 'lb:'
end

-- packed_at returns the shared hash and the field of id.
local function packed_at(tprefix, id)
  local pfx, field = packed_split(id)
  return packed_base(tprefix) .. pfx, field
end

-- payload_past reports whether the payload of task id would take bytes
-- (what a take holds already) past limit. Its size is asked (HSTRLEN: in
-- its hash, else in its packed field) only once bytes pass an eighth of
-- limit; below that the payload is read whatever it weighs, and its
-- reader checks it then.
local function payload_past(tprefix, id, bytes, limit)
  if bytes < limit / 8 then
    return false
  end
  local n = redis.pcall('HSTRLEN', tprefix .. id, F_PAYLOAD)
  if n == 0 then
    local key, field = packed_at(tprefix, id)
    n = redis.pcall('HSTRLEN', key, field)
  end
  return type(n) == 'number' and bytes + n > limit
end

-- packed_payload returns the packed payload of id (false when there is
-- none) and where it is (hash, field), or nil, err when the hash is on
-- another cluster node (a slot migration: the pcall's error).
local function packed_payload(tprefix, id)
  local key, field = packed_at(tprefix, id)
  local p = redis.pcall('HGET', key, field)
  if type(p) == 'table' and p.err then
    return nil, p.err
  end
  return p, key, field
end

-- packed_drop deletes id's packed field (its hash goes with its last field).
-- A packed hash that is not a hash is left alone (its callers have popped
-- the id already: an error would lose the ids popped with it).
local function packed_drop(tprefix, id)
  local key, field = packed_at(tprefix, id)
  redis.pcall('HDEL', key, field)
end

-- unpack_task makes the hash of waiting task id (key tkey) from its packed
-- field, if it has one, and returns true when it did.
local function unpack_task(tkey, tprefix, id)
  local key, field = packed_at(tprefix, id)
  local p = redis.pcall('HGET', key, field)
  if type(p) ~= 'string' then
    return false -- none, or a packed hash that is not a hash (see packed_drop)
  end
  redis.call('HSET', tkey, F_PAYLOAD, p)
  redis.call('HDEL', key, field)
  return true
end

-- packed_group groups n tasks by packed hash: their ids are argv[at ..
-- at+n-1] (argv: the script's ARGV) and their payloads the n values after
-- them. It returns the hashes' names in order of first use and, by name,
-- {fields, at (each field's task number, 1-based), pairs (field, payload,
-- ...)}: what an HMGET and an HSET of each hash need. The name of a hash is
-- built once per run of ids that share it (a chunk of consecutive xids
-- touches one or two).
local function packed_group(tp, argv, at, n)
  local groups, order = {}, {}
  local lastpfx, g
  local lb = packed_base(tp)
  for i = 1, n do
    local pfx, field = packed_split(argv[at + i - 1])
    if pfx ~= lastpfx then
      local key = lb .. pfx
      g = groups[key]
      if not g then
        g = {fields = {}, at = {}, pairs = {}}
        groups[key] = g
        order[#order + 1] = key
      end
      lastpfx = pfx
    end
    local f = g.fields
    f[#f + 1] = field
    g.at[#g.at + 1] = i
    local p = g.pairs
    p[#p + 1] = field
    p[#p + 1] = argv[at + n + i - 1]
  end
  return order, groups
end

-- packed_write writes the groups of packed_group, one HSET per hash, and
-- pushes the ids argv[at .. at+n-1] at the back of list (RPUSH in runs:
-- Lua's unpack is limited to a few thousand values).
local function packed_write(order, groups, list, argv, at, n)
  for _, key in ipairs(order) do
    redis.call('HSET', key, unpack(groups[key].pairs))
  end
  local i, last = at, at + n - 1
  while i <= last do
    local j = math.min(i + 999, last)
    redis.call('RPUSH', list, unpack(argv, i, j))
    i = j + 1
  end
end
