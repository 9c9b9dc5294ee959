-- What happened after the yes (issue 36).
-- * `expect_outcome_seconds`: the route's, when the question was asked: a confirmed call
--   with no report that long after its decision gets `run_status = 'unknown'`.
-- * `run_due_at`: when a call that was approved (confirmed, or an approval carrying a call
--   answered yes) is owed its report: its decision plus `expect_outcome_seconds`.
-- * `run_*`: the agent's report of running the confirmed call (`executed`, `failed`,
--   `not_executed`) or the service's `unknown`; `run_at` is when it was reported (or
--   found missing). `run_shown`: whether every message of the question shows the run as
--   it now is (a restart edits the ones that do not).
-- * `recalled_json`: the earlier run of the same agent's same tool that failed or went
--   unreported, told to whoever is asked this question.
ALTER TABLE confirmations ADD COLUMN expect_outcome_seconds INTEGER;
ALTER TABLE confirmations ADD COLUMN run_due_at INTEGER;
ALTER TABLE confirmations ADD COLUMN run_status TEXT
    CHECK (run_status IN ('executed', 'failed', 'not_executed', 'unknown'));
ALTER TABLE confirmations ADD COLUMN run_summary TEXT;
ALTER TABLE confirmations ADD COLUMN run_error TEXT;
ALTER TABLE confirmations ADD COLUMN run_duration_ms INTEGER;
ALTER TABLE confirmations ADD COLUMN run_at INTEGER;
ALTER TABLE confirmations ADD COLUMN run_shown INTEGER NOT NULL DEFAULT 1;
ALTER TABLE confirmations ADD COLUMN recalled_json TEXT;

-- The calls still owed a report (the sweep that marks them `unknown` reads these).
CREATE INDEX confirmations_run_due ON confirmations (run_due_at)
    WHERE run_status IS NULL AND run_due_at IS NOT NULL;
-- The last reported run of an agent's tool (recalled to the next approver).
CREATE INDEX confirmations_runs ON confirmations (agent, tool, decided_at)
    WHERE run_status IS NOT NULL;
-- Runs not yet shown in their messages (restart recovery).
CREATE INDEX confirmations_run_unshown ON confirmations (run_at) WHERE NOT run_shown;
-- The calls a window let through (`/windows` and the record count them).
CREATE INDEX confirmations_window_hits ON confirmations (agent, tool, args_hash, created_at)
    WHERE via = 'window';
