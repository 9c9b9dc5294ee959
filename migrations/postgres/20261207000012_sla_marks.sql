-- A route's `sla_seconds` (issue 50): how many of a pending question's SLA marks were
-- shown on its card (0 none, 1 "at risk", 2 "overdue"), claimed with a conditional
-- update as reminders are, so a restart neither repeats nor skips one, and a breach is
-- counted once.
ALTER TABLE confirmations ADD COLUMN sla_marks BIGINT NOT NULL DEFAULT 0;
