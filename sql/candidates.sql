-- Speculative candidates at the run's as-of: which (user, item) pairs will be requested in the next horizon?
-- Input views: `events` (the events visible at the as-of, cached once per tick, each row carrying the as-of
-- as `tick_as_of`) and `retrieval_parts` (user_id, item_id, score: the FM retrieval source, computed in
-- jobs/candidates.py; empty when off). Only events with ts <= tick_as_of are read (docs/architecture.md §2).
-- Every window that ends at the as-of is written against `tick_as_of` (`ts > tick_as_of - the window's
-- length`, in microseconds), never as a timestamp literal, so the query text, and the code Spark compiles
-- for it, is the same every hour but for the item statistics' period (solaris/precompute/spark_features.py,
-- visible_events). `ts` stays alone on its side: where `tick_as_of` is a constant (a stage run in its own
-- process) Spark folds the bound into a timestamp, and the table scan skips the files outside the window.
-- Users active in the last {lookback_micros} microseconds get candidates from these sources, each tagged in
-- `source`:
--   cooc       items co-engaged (same user, recent events in ({cooc_start}, {stats_as_of}]) with the user's
--              recent items
--   trending   the most engaged items in the last {trending_micros} microseconds
--   recent     the user's own recent items (re-exposure)
--   next       session continuation: what users who engaged the user's last items engaged next (the
--              {next_window} events after them, events in ({cooc_start}, {stats_as_of}])
--   popular    the items engaged by the most distinct users in the last {popular_micros} microseconds
--   retrieval  the FM's user representation against item representations (FAISS inner product)
-- Every source scores in [0, 1] per user and keeps its best {source_items} items per user; all but
-- `recent` skip items the user already engaged. The blend is linear in the source scores and three
-- activity features of the user (`features` below): spec_score = the blend (a logit when learned),
-- request_score = the request model's probability (the verifier's input when precompute.verifier.rule
-- is `request`; NULL without one).
-- The item-item statistics (item_cooc, item_next) are as of {stats_as_of} <= the as-of
-- (precompute.candidates.item_stats_hours); jobs/candidates.py shares them between the runs of a period.
-- jobs/candidates.py caches active_users, user_activity, user_recent and engaged once per run: several
-- sources and the features read them.

CREATE OR REPLACE TEMP VIEW past_events AS
SELECT user_id, item_id, ts, tick_as_of FROM events WHERE ts <= tick_as_of;

-- The fast lane (jobs/fast_lane.py) speculates for its users only (view `lane_users`, filled by
-- jobs/candidates.py): every per-user view below joins active_users, so they all shrink with it.
CREATE OR REPLACE TEMP VIEW active_users AS
SELECT DISTINCT user_id FROM past_events
WHERE ts > timestamp_micros(unix_micros(tick_as_of) - {lookback_micros}) AND (NOT {restrict_users} OR user_id IN (SELECT user_id FROM lane_users));

-- Fractional constants carry the D suffix: a plain 1.0 is a DECIMAL literal in Spark SQL, and decimal
-- arithmetic runs in BigDecimal, several times slower than doubles; every score here is a double anyway.
-- Sums are the exception: a double sum depends on the order Spark adds its terms in, which changes
-- between runs, so a rerun could rank near-ties differently. The item-item weights are therefore summed
-- as integers (nano-units, exact in any order) and turned into doubles after the sum.

-- Why activity features: ML-1M users engage in bursts, so who asks next hour is mostly who is asking now.
CREATE OR REPLACE TEMP VIEW user_activity AS
SELECT p.user_id,
       ln(1.0D + count(*)) AS log_events,
       ln(1.0D + count_if(p.ts > timestamp_micros(unix_micros(p.tick_as_of) - 3600000000))) AS log_events_last_hour,
       least((unix_seconds(max(p.tick_as_of)) - unix_seconds(max(p.ts))) / 86400.0D, 7.0D) AS days_since_last
FROM past_events p JOIN active_users a ON a.user_id = p.user_id
GROUP BY p.user_id;

CREATE OR REPLACE TEMP VIEW user_recent AS
SELECT user_id, item_id, ts, rn FROM (
  SELECT p.user_id, p.item_id, p.ts,
         row_number() OVER (PARTITION BY p.user_id ORDER BY p.ts DESC, p.item_id) AS rn
  FROM past_events p JOIN active_users a ON a.user_id = p.user_id
) WHERE rn <= {recent_items};

CREATE OR REPLACE TEMP VIEW cooc_window AS
SELECT user_id, item_id FROM (
  SELECT user_id, item_id, row_number() OVER (PARTITION BY user_id ORDER BY ts DESC, item_id) AS rn
  FROM past_events WHERE ts > {cooc_start} AND ts <= {stats_as_of}
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

-- item -> next item: b among the {next_window} events the same user engaged right after a (by time, then
-- item id: ML-1M stores many ratings of one session under one timestamp, so their order is unknown).
-- Why a window frame and not a self-join on positions: the events are already grouped and ordered per user
-- for the frame, so the pairs come out of one sort instead of a join of every event with its next ones.
CREATE OR REPLACE TEMP VIEW user_sequence AS
SELECT user_id, item_id,
       collect_list(item_id) OVER (PARTITION BY user_id ORDER BY ts, item_id
                                   ROWS BETWEEN 1 FOLLOWING AND {next_window} FOLLOWING) AS next_items
FROM past_events WHERE ts > {cooc_start} AND ts <= {stats_as_of};

CREATE OR REPLACE TEMP VIEW item_next AS
SELECT item_a, item_b, n FROM (
  SELECT item_a, item_b, n, row_number() OVER (PARTITION BY item_a ORDER BY n DESC, item_b) AS rn
  FROM (
    SELECT s.item_id AS item_a, b.item_id AS item_b, count(*) AS n
    FROM user_sequence s LATERAL VIEW explode(s.next_items) b AS item_id
    WHERE s.item_id <> b.item_id
    GROUP BY s.item_id, b.item_id
  )
) WHERE rn <= {next_neighbors};

CREATE OR REPLACE TEMP VIEW engaged AS
SELECT DISTINCT p.user_id, p.item_id FROM past_events p JOIN active_users a ON a.user_id = p.user_id;

CREATE OR REPLACE TEMP VIEW rule_cooc AS
SELECT user_id, item_id, raw / max(raw) OVER (PARTITION BY user_id) AS score FROM (
  -- more recent items weigh more: n / (1 + rn), summed in integer nano-units (see the note above)
  SELECT r.user_id, c.item_b AS item_id,
         sum(CAST(round(c.n * 1000000000 / (1 + r.rn)) AS BIGINT)) / 1000000000 AS raw
  FROM user_recent r JOIN item_cooc c ON c.item_a = r.item_id
  GROUP BY r.user_id, c.item_b
);

CREATE OR REPLACE TEMP VIEW rule_next AS
SELECT user_id, item_id, raw / max(raw) OVER (PARTITION BY user_id) AS score FROM (
  SELECT r.user_id, c.item_b AS item_id,
         sum(CAST(round(c.n * 1000000000 / (1 + r.rn)) AS BIGINT)) / 1000000000 AS raw
  FROM user_recent r JOIN item_next c ON c.item_a = r.item_id
  WHERE r.rn <= {next_seeds}
  GROUP BY r.user_id, c.item_b
);

CREATE OR REPLACE TEMP VIEW trending AS
SELECT item_id, n / max(n) OVER () AS score FROM (
  SELECT item_id, n, row_number() OVER (ORDER BY n DESC, item_id) AS rn
  FROM (SELECT item_id, count(*) AS n FROM past_events WHERE ts > timestamp_micros(unix_micros(tick_as_of) - {trending_micros}) GROUP BY item_id)
) WHERE rn <= {trending_items};

CREATE OR REPLACE TEMP VIEW popular AS
SELECT item_id, n / max(n) OVER () AS score FROM (
  SELECT item_id, n, row_number() OVER (ORDER BY n DESC, item_id) AS rn
  FROM (SELECT item_id, count(DISTINCT user_id) AS n FROM past_events WHERE ts > timestamp_micros(unix_micros(tick_as_of) - {popular_micros}) GROUP BY item_id)
) WHERE rn <= {popular_items};

CREATE OR REPLACE TEMP VIEW source_scores AS
SELECT user_id, item_id, 'cooc' AS source, score FROM rule_cooc WHERE {use_cooc}
UNION ALL
SELECT a.user_id, t.item_id, 'trending' AS source, t.score FROM active_users a CROSS JOIN trending t WHERE {use_trending}
UNION ALL
SELECT user_id, item_id, 'recent' AS source, 1.0D - (rn - 1) / {recent_items} AS score FROM user_recent WHERE {use_recent}
UNION ALL
SELECT user_id, item_id, 'next' AS source, score FROM rule_next WHERE {use_next}
UNION ALL
SELECT a.user_id, p.item_id, 'popular' AS source, p.score FROM active_users a CROSS JOIN popular p WHERE {use_popular}
UNION ALL
SELECT r.user_id, r.item_id, 'retrieval' AS source, r.score
FROM retrieval_parts r JOIN active_users a ON a.user_id = r.user_id WHERE {use_retrieval};

-- Each source's best items per user (source_rank: the benchmark's per-source budgets), engaged items skipped.
CREATE OR REPLACE TEMP VIEW source_parts AS
SELECT user_id, item_id, source, score, source_rank FROM (
  SELECT s.*, row_number() OVER (PARTITION BY s.user_id, s.source ORDER BY s.score DESC, s.item_id) AS source_rank
  FROM source_scores s
  LEFT ANTI JOIN engaged e ON e.user_id = s.user_id AND e.item_id = s.item_id AND s.source <> 'recent'
) WHERE source_rank <= {source_items};

-- One row per pair: the source scores (0 when a source did not propose it) and the user's activity.
-- Why plain aggregates (no collect_set of the names): they run as one hash aggregation of the pairs; the
-- names are listed in alphabetical order, as sorting the set of them would.
CREATE OR REPLACE TEMP VIEW pair_sources AS
SELECT user_id, item_id,
       bool_or(source = 'cooc') AS has_cooc, max(CASE WHEN source = 'cooc' THEN score END) AS best_cooc,
       bool_or(source = 'trending') AS has_trending, max(CASE WHEN source = 'trending' THEN score END) AS best_trending,
       bool_or(source = 'recent') AS has_recent, max(CASE WHEN source = 'recent' THEN score END) AS best_recent,
       bool_or(source = 'next') AS has_next, max(CASE WHEN source = 'next' THEN score END) AS best_next,
       bool_or(source = 'popular') AS has_popular, max(CASE WHEN source = 'popular' THEN score END) AS best_popular,
       bool_or(source = 'retrieval') AS has_retrieval, max(CASE WHEN source = 'retrieval' THEN score END) AS best_retrieval
FROM source_parts
GROUP BY user_id, item_id;

CREATE OR REPLACE TEMP VIEW features AS
SELECT s.user_id, s.item_id,
       concat_ws(',', IF(s.has_cooc, 'cooc', NULL), IF(s.has_next, 'next', NULL), IF(s.has_popular, 'popular', NULL),
                 IF(s.has_recent, 'recent', NULL), IF(s.has_retrieval, 'retrieval', NULL),
                 IF(s.has_trending, 'trending', NULL)) AS source,
       coalesce(s.best_cooc, 0.0D) AS score_cooc,
       coalesce(s.best_trending, 0.0D) AS score_trending,
       coalesce(s.best_recent, 0.0D) AS score_recent,
       coalesce(s.best_next, 0.0D) AS score_next,
       coalesce(s.best_popular, 0.0D) AS score_popular,
       coalesce(s.best_retrieval, 0.0D) AS score_retrieval,
       u.log_events, u.log_events_last_hour, u.days_since_last
FROM pair_sources s JOIN user_activity u ON u.user_id = s.user_id;

CREATE OR REPLACE TEMP VIEW candidate_pairs AS
SELECT f.*,
       CAST({blend_bias} + {blend_cooc} * score_cooc + {blend_trending} * score_trending
            + {blend_recent} * score_recent + {blend_next} * score_next + {blend_popular} * score_popular
            + {blend_retrieval} * score_retrieval + {blend_log_events} * log_events
            + {blend_log_events_last_hour} * log_events_last_hour
            + {blend_days_since_last} * days_since_last AS DOUBLE) AS spec_score,
       CASE WHEN {has_request_model} THEN CAST(1.0D / (1.0D + exp(-(
            {request_bias} + {request_cooc} * score_cooc + {request_trending} * score_trending
            + {request_recent} * score_recent + {request_next} * score_next + {request_popular} * score_popular
            + {request_retrieval} * score_retrieval + {request_log_events} * log_events
            + {request_log_events_last_hour} * log_events_last_hour
            + {request_days_since_last} * days_since_last))) AS DOUBLE) END AS request_score
FROM features f;

-- Cap per user, then the global budget; ties broken by ids so reruns pick the same pairs.
SELECT * FROM (
  SELECT *, row_number() OVER (PARTITION BY user_id ORDER BY spec_score DESC, item_id) AS user_rank
  FROM candidate_pairs
) WHERE user_rank <= {per_user}
ORDER BY spec_score DESC, user_id, item_id
LIMIT {budget};
