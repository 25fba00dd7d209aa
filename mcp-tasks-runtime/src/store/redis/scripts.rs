//! The Lua scripts behind every write and every multi-key read. Each runs atomically in
//! Redis; `ARGV[1]` is always the key prefix with its trailing `:`.
//!
//! Keys, under the prefix `P:`:
//! - `P:task:ID`: a hash per task, one field per stored column plus `seq`, its creation
//!   number;
//! - `P:seq`, `P:cseq`: the creation and change counters;
//! - `P:own:OWNER` and `P:unowned`: sorted sets of ids by creation number (listing);
//! - `P:queued`: unfinished tasks without a lease, by creation number (claims);
//! - `P:leases`: unfinished tasks with a lease, by lease end in milliseconds (lapsed scan);
//! - `P:expiry`: terminal tasks with a TTL, by expiry in milliseconds; each member is
//!   `LEN:ID` followed by `=OWNER` when the task has an owner, so the expiry scan can clean
//!   the listing even after Redis removed the record itself;
//! - `P:changes`: the change feed, ids by change number; `P:changes:floor` is the highest
//!   change number trimmed from it;
//! - `P:stt:STATUS:TOOL`: sorted sets of ids by creation number, one per status and tool
//!   (listing across owners, counts), and `P:pairs`, the set of `STATUS:TOOL` that have one;
//!   records of synchronous calls (field `synchronous` = `1`) are in neither these nor the
//!   owners' listings;
//! - `P:unique:KEY`: the id of the unfinished task that holds the unique key `KEY`, set by
//!   the create and write that give it the key, deleted (when it still names that task) by
//!   the write that ends it, its deletion or its expiry;
//!   `P:scan-indexed` marks a store whose tasks all have their entry (see `BACKFILL`);
//! - the channel `P:signal`, where every write publishes its change number.

/// Helpers every script starts with.
const COMMON: &str = r#"
local P = ARGV[1]
local function unfinished(status)
  return status == 'working' or status == 'input_required'
end
local function owner_key(owner)
  if owner then return P .. 'own:' .. owner end
  return P .. 'unowned'
end
local function expiry_member(id, owner)
  local m = string.len(id) .. ':' .. id
  if owner then m = m .. '=' .. owner end
  return m
end
local function parse_member(m)
  local colon = string.find(m, ':', 1, true)
  local n = tonumber(string.sub(m, 1, colon - 1))
  local id = string.sub(m, colon + 1, colon + n)
  local rest = string.sub(m, colon + n + 1)
  local owner = nil
  if rest ~= '' then owner = string.sub(rest, 2) end
  return id, owner
end
-- Removes a task from the claim, lease and expiry indexes (not from its owner's listing).
local function unindex(id, status, owner, leased, expires)
  if unfinished(status) then
    if leased then
      redis.call('ZREM', P .. 'leases', id)
    else
      redis.call('ZREM', P .. 'queued', id)
    end
  end
  if expires then
    redis.call('ZREM', P .. 'expiry', expiry_member(id, owner))
  end
end
-- Adds a task to the indexes its fields call for, and sets Redis' own expiry of the record.
local function index(id, key, h, seq, grace)
  if unfinished(h.status) then
    if h.lease_worker then
      redis.call('ZADD', P .. 'leases', h.lease_until, id)
    else
      redis.call('ZADD', P .. 'queued', seq, id)
    end
  end
  if h.expires then
    redis.call('ZADD', P .. 'expiry', h.expires, expiry_member(id, h.owner))
    redis.call('PEXPIREAT', key, string.format('%d', tonumber(h.expires) + grace))
  end
end
-- The listing of a status and tool, for scans across owners.
local function pair_key(status, tool)
  return P .. 'stt:' .. status .. ':' .. tool
end
local function index_pair(id, status, tool, seq)
  redis.call('ZADD', pair_key(status, tool), seq, id)
  redis.call('SADD', P .. 'pairs', status .. ':' .. tool)
end
local function unindex_pair(id, status, tool)
  local key = pair_key(status, tool)
  redis.call('ZREM', key, id)
  if redis.call('ZCARD', key) == 0 then
    redis.call('SREM', P .. 'pairs', status .. ':' .. tool)
  end
end
-- Drops an id from every status and tool listing (its record is gone, so which is unknown).
local function unindex_pairs_of(id)
  for _, pair in ipairs(redis.call('SMEMBERS', P .. 'pairs')) do
    local key = P .. 'stt:' .. pair
    if redis.call('ZREM', key, id) == 1 and redis.call('ZCARD', key) == 0 then
      redis.call('SREM', P .. 'pairs', pair)
    end
  end
end
-- Records a change in the feed, trimming its oldest entries past `max`.
local function changed(id, max)
  local c = string.format('%d', redis.call('INCR', P .. 'cseq'))
  redis.call('ZADD', P .. 'changes', c, id)
  local n = redis.call('ZCARD', P .. 'changes')
  if n > max then
    local popped = redis.call('ZPOPMIN', P .. 'changes', n - max)
    redis.call('SET', P .. 'changes:floor', popped[#popped])
  end
  return c
end
-- The key of a unique key's holder.
local function pointer(ukey)
  return P .. 'unique:' .. ukey
end
-- Frees the unique key `ukey` if the task `id` holds it.
local function release(id, ukey)
  if ukey and redis.call('GET', pointer(ukey)) == id then
    redis.call('DEL', pointer(ukey))
  end
end
-- The unfinished task that holds `ukey`, if any; a pointer to a task that no longer holds
-- it is dropped.
local function holder(ukey)
  local id = redis.call('GET', pointer(ukey))
  if not id then return nil end
  local got = redis.call('HMGET', P .. 'task:' .. id, 'status', 'unique_key')
  if got[1] and unfinished(got[1]) and got[2] == ukey then return id end
  redis.call('DEL', pointer(ukey))
  return nil
end
-- The unique key a task with these fields holds: its key while it is unfinished.
local function held_key(status, ukey)
  if ukey and unfinished(status) then return ukey end
  return nil
end
local function fields(from)
  local h = {}
  for i = from, #ARGV, 2 do h[ARGV[i]] = ARGV[i + 1] end
  return h
end
"#;

/// `create`: ARGV = prefix, id, expiry grace ms, feed size, then field/value pairs.
/// Returns `{'ok'}`, `{'duplicate'}` when the id exists, or `{'taken', HOLDER}` when an
/// unfinished task holds the unique key.
const CREATE: &str = r#"
local id = ARGV[2]
local key = P .. 'task:' .. id
if redis.call('EXISTS', key) == 1 then return {'duplicate'} end
local h = fields(5)
local ukey = held_key(h.status, h.unique_key)
if ukey then
  local other = holder(ukey)
  if other then return {'taken', other} end
end
local seq = string.format('%d', redis.call('INCR', P .. 'seq'))
redis.call('HSET', key, 'seq', seq, unpack(ARGV, 5))
if h.synchronous ~= '1' then
  redis.call('ZADD', owner_key(h.owner), seq, id)
  index_pair(id, h.status, h.tool, seq)
end
index(id, key, h, seq, tonumber(ARGV[3]))
if ukey then redis.call('SET', pointer(ukey), id) end
redis.call('PUBLISH', P .. 'signal', changed(id, tonumber(ARGV[4])))
return {'ok'}
"#;

/// `compare_and_set`: ARGV = prefix, id, expected version, expiry grace ms, feed size, then
/// field/value pairs (with the new version). Returns 1, or 0 when the version differs or the
/// task is gone; fails, changing nothing, when it would give the task a unique key another
/// unfinished task holds.
const UPDATE: &str = r#"
local id = ARGV[2]
local key = P .. 'task:' .. id
local old = redis.call('HMGET', key, 'version', 'status', 'owner', 'lease_worker', 'expires', 'seq', 'tool', 'unique_key', 'synchronous')
if not old[1] or old[1] ~= ARGV[3] then return 0 end
local h = fields(6)
local seq = old[6]
local old_ukey = held_key(old[2], old[8] or nil)
local ukey = held_key(h.status, h.unique_key)
if ukey and ukey ~= old_ukey then
  local other = holder(ukey)
  if other and other ~= id then
    return redis.error_reply('task ' .. id .. ': its unique key is held by the unfinished task ' .. other)
  end
end
local old_listed, listed = old[9] ~= '1', h.synchronous ~= '1'
if old[2] ~= h.status or old[7] ~= h.tool or old_listed ~= listed then
  if old_listed then unindex_pair(id, old[2], old[7] or '') end
  if listed then index_pair(id, h.status, h.tool, seq) end
end
unindex(id, old[2], old[3] or nil, old[4], old[5])
local old_owner = old[3] or nil
if old_owner ~= h.owner or old_listed ~= listed then
  if old_listed then redis.call('ZREM', owner_key(old_owner), id) end
  if listed then redis.call('ZADD', owner_key(h.owner), seq, id) end
end
redis.call('DEL', key)
redis.call('HSET', key, 'seq', seq, unpack(ARGV, 6))
index(id, key, h, seq, tonumber(ARGV[4]))
if old_ukey ~= ukey then
  release(id, old_ukey)
  if ukey then redis.call('SET', pointer(ukey), id) end
end
redis.call('PUBLISH', P .. 'signal', changed(id, tonumber(ARGV[5])))
return 1
"#;

/// `delete`: ARGV = prefix, id. Returns 1 when the task existed.
const DELETE: &str = r#"
local id = ARGV[2]
local key = P .. 'task:' .. id
local old = redis.call('HMGET', key, 'status', 'owner', 'lease_worker', 'expires', 'tool', 'unique_key')
if not old[1] then return 0 end
release(id, old[6] or nil)
unindex(id, old[1], old[2] or nil, old[3], old[4])
unindex_pair(id, old[1], old[5] or '')
redis.call('ZREM', owner_key(old[2] or nil), id)
redis.call('DEL', key)
return 1
"#;

/// `list`: ARGV = prefix, "1" with an owner or "0", owner, cursor (a creation number),
/// limit. Returns `{{more}}` followed by the tasks' fields (`HGETALL`), oldest first.
/// Entries whose record is gone or belongs to another task are dropped on the way.
const LIST: &str = r#"
local owner = nil
if ARGV[2] == '1' then owner = ARGV[3] end
local index_key = owner_key(owner)
local after = ARGV[4]
local limit = tonumber(ARGV[5])
local out = {{'0'}}
local found = 0
while true do
  local batch = redis.call('ZRANGEBYSCORE', index_key, '(' .. after, '+inf', 'WITHSCORES', 'LIMIT', 0, limit + 1)
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local id, score = batch[i], batch[i + 1]
    after = score
    local key = P .. 'task:' .. id
    local got = redis.call('HMGET', key, 'owner', 'seq')
    if got[2] and got[2] == score and (got[1] or nil) == owner then
      if found == limit then
        out[1] = {'1'}
        return out
      end
      found = found + 1
      out[#out + 1] = redis.call('HGETALL', key)
    else
      redis.call('ZREM', index_key, id)
    end
  end
end
return out
"#;

/// `expire`: ARGV = prefix, now ms, limit. Deletes up to `limit` tasks that expired and
/// returns their ids.
const EXPIRE: &str = r#"
local now = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local out, seen = {}, {}
while #out < limit do
  local due = redis.call('ZRANGEBYSCORE', P .. 'expiry', '-inf', now, 'LIMIT', 0, limit - #out)
  if #due == 0 then break end
  for _, m in ipairs(due) do
    redis.call('ZREM', P .. 'expiry', m)
    local id, owner = parse_member(m)
    local key = P .. 'task:' .. id
    local old = redis.call('HMGET', key, 'status', 'owner', 'lease_worker', 'expires', 'tool', 'unique_key')
    if not old[1] then
      -- Redis removed the record at its own expiry; clean its listing entries.
      redis.call('ZREM', owner_key(owner), id)
      unindex_pairs_of(id)
      if not seen[id] then
        seen[id] = true
        out[#out + 1] = id
      end
    elseif (old[2] or nil) == owner and old[4] and tonumber(old[4]) <= now then
      release(id, old[6] or nil)
      unindex(id, old[1], old[2] or nil, old[3], old[4])
      unindex_pair(id, old[1], old[5] or '')
      redis.call('ZREM', owner_key(old[2] or nil), id)
      redis.call('DEL', key)
      if not seen[id] then
        seen[id] = true
        out[#out + 1] = id
      end
    end
    -- Anything else is an entry left by an earlier task of the same id: dropped above.
  end
end
return out
"#;

/// `claim`: ARGV = prefix, worker, lease end ms, limit, feed size, then the tools to skip.
/// Returns the claimed tasks' fields, oldest first.
const CLAIM: &str = r#"
local worker, lease_end, limit, max = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local skip = {}
for i = 6, #ARGV do skip[ARGV[i]] = true end
local picked, stale = {}, {}
local offset = 0
while #picked < limit do
  local batch = redis.call('ZRANGE', P .. 'queued', offset, offset + 255)
  if #batch == 0 then break end
  offset = offset + #batch
  for _, id in ipairs(batch) do
    local got = redis.call('HMGET', P .. 'task:' .. id, 'tool', 'status', 'lease_worker')
    if not got[1] or not unfinished(got[2]) or got[3] then
      stale[#stale + 1] = id
    elseif not skip[got[1]] then
      picked[#picked + 1] = id
      if #picked == limit then break end
    end
  end
end
for _, id in ipairs(stale) do redis.call('ZREM', P .. 'queued', id) end
local out = {}
for _, id in ipairs(picked) do
  local key = P .. 'task:' .. id
  redis.call('ZREM', P .. 'queued', id)
  redis.call('HINCRBY', key, 'epoch', 1)
  redis.call('HINCRBY', key, 'version', 1)
  redis.call('HSET', key, 'lease_worker', worker, 'lease_until', lease_end)
  redis.call('ZADD', P .. 'leases', lease_end, id)
  changed(id, max)
  out[#out + 1] = redis.call('HGETALL', key)
end
if #out > 0 then
  redis.call('PUBLISH', P .. 'signal', redis.call('GET', P .. 'cseq'))
end
return out
"#;

/// `lapsed`: ARGV = prefix, now ms, limit. The fields of unfinished tasks whose lease
/// ended, earliest end first.
const LAPSED: &str = r#"
local ids = redis.call('ZRANGEBYSCORE', P .. 'leases', '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  local got = redis.call('HGETALL', P .. 'task:' .. id)
  if #got > 0 then out[#out + 1] = got end
end
return out
"#;

/// `unfinished`: ARGV = prefix. The ids of every task that is not terminal, queued ones
/// (oldest first) then leased ones: one snapshot of both indexes, which holds Redis up only
/// for as long as reading ids takes; the records are read afterwards, in batches.
const UNFINISHED: &str = r#"
local out = redis.call('ZRANGE', P .. 'queued', 0, -1)
for _, id in ipairs(redis.call('ZRANGE', P .. 'leases', 0, -1)) do
  out[#out + 1] = id
end
return out
"#;

/// `changes`: ARGV = prefix, cursor, limit. Returns the change counter, the trimmed floor,
/// then up to `limit` ids written after the cursor, each followed by its change number:
/// `{counter, floor, id1, n1, id2, n2, ...}`.
const CHANGES: &str = r#"
local out = {redis.call('GET', P .. 'cseq') or '0', redis.call('GET', P .. 'changes:floor') or '0'}
if tonumber(ARGV[3]) > 0 then
  local got = redis.call('ZRANGEBYSCORE', P .. 'changes', '(' .. ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
  for _, v in ipairs(got) do out[#out + 1] = v end
end
return out
"#;

/// `scan`: ARGV = prefix, below (a creation number), take, limit, "1" with an owner or "0",
/// owner, tool or "", created from, created before, updated from, updated before (each
/// milliseconds or ""), then the statuses. Reads up to `take` entries of the listings the
/// filter names, newest first, below `below`; returns `{floor}` (the creation number below
/// which a listing was not read, or "") followed by the fields of up to `limit + 1`
/// matching tasks, newest first. Entries whose record is gone are dropped on the way.
const SCAN: &str = r#"
local below, take, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local owner = nil
if ARGV[5] == '1' then owner = ARGV[6] end
local tool = nil
if ARGV[7] ~= '' then tool = ARGV[7] end
local bounds = {}
for i = 8, 11 do bounds[i - 7] = tonumber(ARGV[i]) end
local statuses = {}
for i = 12, #ARGV do statuses[ARGV[i]] = true end
local sets = {}
if owner then
  sets[1] = owner_key(owner)
else
  for _, pair in ipairs(redis.call('SMEMBERS', P .. 'pairs')) do
    local colon = string.find(pair, ':', 1, true)
    local status, t = string.sub(pair, 1, colon - 1), string.sub(pair, colon + 1)
    if statuses[status] and (not tool or t == tool) then sets[#sets + 1] = P .. 'stt:' .. pair end
  end
end
local found = {}
for _, key in ipairs(sets) do
  local got = redis.call('ZREVRANGEBYSCORE', key, '(' .. below, '-inf', 'WITHSCORES', 'LIMIT', 0, take)
  for i = 1, #got, 2 do found[#found + 1] = {tonumber(got[i + 1]), got[i], key} end
end
table.sort(found, function(a, b) return a[1] > b[1] end)
local out = {''}
if #found >= take then
  out[1] = string.format('%d', found[take][1])
  for i = #found, take + 1, -1 do found[i] = nil end
end
local function within(value, from, before)
  local v = tonumber(value)
  if not v then return false end
  if from and v < from then return false end
  if before and v >= before then return false end
  return true
end
local matched = 0
for _, entry in ipairs(found) do
  if matched > limit then break end
  local seq, id, set = entry[1], entry[2], entry[3]
  local key = P .. 'task:' .. id
  local got = redis.call('HMGET', key, 'seq', 'status', 'tool', 'owner', 'created_at', 'updated_at')
  if not got[1] or tonumber(got[1]) ~= seq then
    redis.call('ZREM', set, id)
  elseif statuses[got[2]] and (not tool or got[3] == tool) and (not owner or got[4] == owner)
    and within(got[5], bounds[1], bounds[2]) and within(got[6], bounds[3], bounds[4]) then
    matched = matched + 1
    out[#out + 1] = redis.call('HGETALL', key)
  end
end
return out
"#;

/// `count`: ARGV = prefix. `{STATUS:TOOL, n, ...}` for every status and tool with tasks.
const COUNT: &str = r#"
local out = {}
for _, pair in ipairs(redis.call('SMEMBERS', P .. 'pairs')) do
  out[#out + 1] = pair
  out[#out + 1] = redis.call('ZCARD', P .. 'stt:' .. pair)
end
return out
"#;

/// `backfill`: ARGV = prefix, SCAN cursor. Gives up to a few hundred tasks of a store written
/// before the listings by status and tool existed their entries; returns the next cursor
/// ("0" when done, after which `P:scan-indexed` is set). Entries are added idempotently, so
/// a backfill that races new writes, or runs twice, changes nothing twice.
const BACKFILL: &str = r#"
local got = redis.call('SCAN', ARGV[2], 'MATCH', P .. 'task:*', 'COUNT', 500)
for _, key in ipairs(got[2]) do
  local h = redis.call('HMGET', key, 'seq', 'status', 'tool', 'id', 'synchronous')
  if h[1] and h[2] and h[3] and h[4] and h[5] ~= '1' then index_pair(h[4], h[2], h[3], h[1]) end
end
if got[1] == '0' then redis.call('SET', P .. 'scan-indexed', '1') end
return got[1]
"#;

/// Every script, compiled once per store.
pub(super) struct Scripts {
    pub(super) create: ::redis::Script,
    pub(super) update: ::redis::Script,
    pub(super) delete: ::redis::Script,
    pub(super) list: ::redis::Script,
    pub(super) expire: ::redis::Script,
    pub(super) claim: ::redis::Script,
    pub(super) lapsed: ::redis::Script,
    pub(super) unfinished: ::redis::Script,
    pub(super) changes: ::redis::Script,
    pub(super) scan: ::redis::Script,
    pub(super) count: ::redis::Script,
    pub(super) backfill: ::redis::Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        let script = |body: &str| ::redis::Script::new(&format!("{COMMON}{body}"));
        Self {
            create: script(CREATE),
            update: script(UPDATE),
            delete: script(DELETE),
            list: script(LIST),
            expire: script(EXPIRE),
            claim: script(CLAIM),
            lapsed: script(LAPSED),
            unfinished: script(UNFINISHED),
            changes: script(CHANGES),
            scan: script(SCAN),
            count: script(COUNT),
            backfill: script(BACKFILL),
        }
    }
}
