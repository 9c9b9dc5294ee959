-- What happened after the yes (issue 36); see migrations/20261206000012_runs.sql.
ALTER TABLE confirmations ADD COLUMN expect_outcome_seconds BIGINT;
ALTER TABLE confirmations ADD COLUMN run_due_at BIGINT;
ALTER TABLE confirmations ADD COLUMN run_status TEXT
    CHECK (run_status IN ('executed', 'failed', 'not_executed', 'unknown'));
ALTER TABLE confirmations ADD COLUMN run_summary TEXT;
ALTER TABLE confirmations ADD COLUMN run_error TEXT;
ALTER TABLE confirmations ADD COLUMN run_duration_ms BIGINT;
ALTER TABLE confirmations ADD COLUMN run_at BIGINT;
ALTER TABLE confirmations ADD COLUMN run_shown BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE confirmations ADD COLUMN recalled_json TEXT;

CREATE INDEX confirmations_run_due ON confirmations (run_due_at)
    WHERE run_status IS NULL AND run_due_at IS NOT NULL;
CREATE INDEX confirmations_runs ON confirmations (agent, tool, decided_at)
    WHERE run_status IS NOT NULL;
CREATE INDEX confirmations_run_unshown ON confirmations (run_at) WHERE NOT run_shown;
CREATE INDEX confirmations_window_hits ON confirmations (agent, tool, args_hash, created_at)
    WHERE via = 'window';
