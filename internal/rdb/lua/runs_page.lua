-- runs_page: one page of a run index (FindRuns), read from the top down
-- (ZRANGE ... REV: score, then id, descending) after the last entry read
-- that is still where it was read. A page read by rank alone (start +=
-- page) would pass over entries: a run read already that ends meanwhile moves
-- down, below the ranks read, and every entry between moves up one rank.
-- The entry after which the page starts is found again by its id, so
-- whatever moved above it changes nothing: an entry that moved down past
-- it is read again (the caller drops the repeat).
-- KEYS[1] <ns>:{F}:ix:<prop>:<value>  (zset) the index
-- ARGV[1] page size (at most 1,000)
-- ARGV[2..] anchors: id, score pairs, the last entry read first (at most
-- 1,000 pairs); none for the first page.
-- Returns {1, id, score, ...} (the page, after the first anchor whose
-- score is unchanged, or from the top when none were given), or {0}
-- when no anchor is in the index with the score it was read with.
local n = tonumber(ARGV[1])
local start = 0
if #ARGV > 1 then
  start = nil
  for i = 2, #ARGV - 1, 2 do
    if redis.call('ZSCORE', KEYS[1], ARGV[i]) == ARGV[i + 1] then
      start = redis.call('ZREVRANK', KEYS[1], ARGV[i]) + 1
      break
    end
  end
  if not start then
    return {0}
  end
end
local page = redis.call('ZRANGE', KEYS[1], start, start + n - 1, 'REV', 'WITHSCORES')
table.insert(page, 1, 1)
return page
