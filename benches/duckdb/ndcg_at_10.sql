-- Mean nDCG@10 per (model, surface) over a rankwatch JSON Lines log, in DuckDB,
-- with rankwatch's defaults (docs/SPEC.md §3-4): an interaction that names a
-- request id is credited to that user's impression when the item is in the
-- list and its time u is within [t, t + 5 min]; an item's grade is the largest
-- credited grade (click 1, add_to_cart 2, purchase 3, an explicit grade wins);
-- linear gain, discount log2(rank + 1), IDCG@10 from the list's own grades
-- sorted descending; every list counts, with 0 when nothing was credited.
-- Takes the log's path from the variable `log` (SET VARIABLE log = '...').
-- Assumes what benches/gen_log.py writes: camelCase names, every interaction
-- naming its request id, unique request ids, events in time order (so that
-- no list is finalized before its window closes).
WITH events AS MATERIALIZED (
  SELECT impression AS m, interaction AS x
  FROM read_json(getvariable('log'), format = 'newline_delimited', columns = {
    impression: 'STRUCT(requestId VARCHAR, userId VARCHAR, itemIds VARCHAR[], "time" TIMESTAMP, model VARCHAR, surface VARCHAR)',
    interaction: 'STRUCT(userId VARCHAR, itemId VARCHAR, requestId VARCHAR, "type" VARCHAR, "time" TIMESTAMP, grade DOUBLE)'})
),
lists AS (
  SELECT m.requestId AS rid, m.userId AS uid, m.time AS t, m.itemIds AS items,
         coalesce(nullif(m.model, ''), 'default') AS model,
         coalesce(nullif(m.surface, ''), 'default') AS surface
  FROM events WHERE m IS NOT NULL
),
feedback AS (
  SELECT x.requestId AS rid, x.userId AS uid, x.itemId AS item, x.time AS u,
         coalesce(x.grade, CASE x.type WHEN 'click' THEN 1 WHEN 'add_to_cart' THEN 2 WHEN 'purchase' THEN 3 END) AS g
  FROM events WHERE x IS NOT NULL
),
credited AS (  -- one row per list and engaged item: its rank and grade
  SELECT l.rid, l.uid, list_position(l.items, f.item) AS rank, max(f.g) AS g
  FROM feedback f JOIN lists l USING (rid, uid)
  WHERE list_contains(l.items, f.item) AND f.u BETWEEN l.t AND l.t + INTERVAL 300 SECOND
  GROUP BY ALL
),
per_list AS (
  SELECT rid, uid,
         coalesce(sum(g / log2(rank + 1)) FILTER (WHERE rank <= 10), 0) AS dcg,
         coalesce(sum(g / log2(ideal + 1)) FILTER (WHERE ideal <= 10), 0) AS idcg
  FROM (SELECT *, row_number() OVER (PARTITION BY rid, uid ORDER BY g DESC) AS ideal FROM credited)
  GROUP BY ALL
)
SELECT l.model, l.surface, count(*) AS lists,
       sum(CASE WHEN p.idcg > 0 THEN p.dcg / p.idcg ELSE 0 END) / count(*) AS ndcg_at_10
FROM lists l LEFT JOIN per_list p USING (rid, uid)
GROUP BY ALL
ORDER BY ALL;
