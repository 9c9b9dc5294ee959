-- Calls through an MCP gateway (issue 48); see migrations/20261207000009_mcp_calls.sql.
ALTER TABLE confirmations ADD COLUMN server TEXT;
ALTER TABLE confirmations ADD COLUMN annotations_json TEXT;
ALTER TABLE confirmations ADD COLUMN run_overdue BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE confirmations SET run_overdue = TRUE WHERE run_status = 'unknown';

ALTER TABLE windows ADD COLUMN server TEXT NOT NULL DEFAULT '';
ALTER TABLE windows DROP CONSTRAINT windows_pkey;
ALTER TABLE windows ADD PRIMARY KEY (agent, route, owner_id, tool, args_hash, server);
