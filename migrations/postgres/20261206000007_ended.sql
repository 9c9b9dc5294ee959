-- The console's list of ended questions (issue 37); see
-- migrations/20261206000013_ended.sql. `id` is ordered bytewise (`COLLATE "C"`), as the
-- query orders it and as SQLite does.
CREATE INDEX confirmations_ended ON confirmations (decided_at, id COLLATE "C")
    WHERE via IN ('operator', 'timeout', 'withdrawn', 'fail_closed');
