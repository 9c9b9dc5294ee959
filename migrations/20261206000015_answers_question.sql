-- A question's answers, read with every whole question (`WHERE question_id = ? ORDER BY
-- seq`). The only index on `answers` so far, `answers_one_per_person`, is partial
-- (`WHERE user_id IS NOT NULL`), which SQLite may use only for a query that implies its
-- condition: every read of a question scanned the whole table, so a tap got slower with
-- every answer ever stored (BENCHMARKS.md, B3's tap-to-response at 10,000 agents).
-- PostgreSQL's schema has had this index from the start
-- (migrations/postgres/20261202000001_init.sql).
CREATE INDEX answers_question ON answers (question_id, seq);
