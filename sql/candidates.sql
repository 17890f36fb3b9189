-- Speculative candidates at {as_of}: which (user, item) pairs will be requested in the next horizon?
-- Input view: `events` (the events visible at {as_of}, cached once per tick). Only events with ts <= {as_of} are read (docs/architecture.md §2).
-- Users active since {lookback_start} are crossed with three rules, each tagged in `source`:
--   cooc      items co-engaged (same user, recent events since {cooc_start}) with the user's recent items
--   trending  the most engaged items since {trending_start}
--   recent    the user's own recent items (re-exposure)
-- cooc and trending skip items the user already engaged; every rule scores in [0, 1] per user.

CREATE OR REPLACE TEMP VIEW past_events AS
SELECT user_id, item_id, ts FROM events WHERE ts <= {as_of};

CREATE OR REPLACE TEMP VIEW active_users AS
SELECT DISTINCT user_id FROM past_events WHERE ts > {lookback_start};

CREATE OR REPLACE TEMP VIEW user_recent AS
SELECT user_id, item_id, rn FROM (
  SELECT p.user_id, p.item_id,
         row_number() OVER (PARTITION BY p.user_id ORDER BY p.ts DESC, p.item_id) AS rn
  FROM past_events p JOIN active_users a ON a.user_id = p.user_id
) WHERE rn <= {recent_items};

CREATE OR REPLACE TEMP VIEW cooc_window AS
SELECT user_id, item_id FROM (
  SELECT user_id, item_id, row_number() OVER (PARTITION BY user_id ORDER BY ts DESC, item_id) AS rn
  FROM past_events WHERE ts > {cooc_start}
) WHERE rn <= {cooc_items_per_user};

CREATE OR REPLACE TEMP VIEW item_cooc AS
SELECT item_a, item_b, n FROM (
  SELECT item_a, item_b, n, row_number() OVER (PARTITION BY item_a ORDER BY n DESC, item_b) AS rn
  FROM (
    SELECT a.item_id AS item_a, b.item_id AS item_b, count(*) AS n
    FROM cooc_window a JOIN cooc_window b ON a.user_id = b.user_id AND a.item_id <> b.item_id
    GROUP BY a.item_id, b.item_id
  )
) WHERE rn <= {cooc_neighbors};

CREATE OR REPLACE TEMP VIEW engaged AS
SELECT DISTINCT p.user_id, p.item_id FROM past_events p JOIN active_users a ON a.user_id = p.user_id;

CREATE OR REPLACE TEMP VIEW rule_cooc AS
SELECT user_id, item_id, raw / max(raw) OVER (PARTITION BY user_id) AS score FROM (
  SELECT r.user_id, c.item_b AS item_id, sum(c.n / (1.0 + r.rn)) AS raw  -- more recent items weigh more
  FROM user_recent r JOIN item_cooc c ON c.item_a = r.item_id
  GROUP BY r.user_id, c.item_b
);

CREATE OR REPLACE TEMP VIEW trending AS
SELECT item_id, n / max(n) OVER () AS score FROM (
  SELECT item_id, n, row_number() OVER (ORDER BY n DESC, item_id) AS rn
  FROM (SELECT item_id, count(*) AS n FROM past_events WHERE ts > {trending_start} GROUP BY item_id)
) WHERE rn <= {trending_items};

CREATE OR REPLACE TEMP VIEW candidate_parts AS
SELECT user_id, item_id, 'cooc' AS source, {weight_cooc} * score AS part FROM rule_cooc
UNION ALL
SELECT a.user_id, t.item_id, 'trending' AS source, {weight_trending} * t.score AS part
FROM active_users a CROSS JOIN trending t
UNION ALL
SELECT user_id, item_id, 'recent' AS source, {weight_recent} * (1.0 - (rn - 1) / {recent_items}) AS part
FROM user_recent;

CREATE OR REPLACE TEMP VIEW candidate_pairs AS
SELECT c.user_id, c.item_id,
       concat_ws(',', sort_array(collect_set(c.source))) AS source,
       CAST(sum(c.part) AS DOUBLE) AS spec_score
FROM candidate_parts c
LEFT ANTI JOIN engaged e ON e.user_id = c.user_id AND e.item_id = c.item_id AND c.source <> 'recent'
GROUP BY c.user_id, c.item_id;

-- Cap per user, then the global budget; ties broken by ids so reruns pick the same pairs.
SELECT user_id, item_id, source, spec_score FROM (
  SELECT *, row_number() OVER (PARTITION BY user_id ORDER BY spec_score DESC, item_id) AS user_rank
  FROM candidate_pairs
) WHERE user_rank <= {per_user}
ORDER BY spec_score DESC, user_id, item_id
LIMIT {budget};
