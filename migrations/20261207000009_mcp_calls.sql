-- no-transaction
-- Calls through an MCP gateway (issue 48):
-- * `server`: the name of the MCP server (upstream) the call goes to; NULL for a call
--   that names none. `annotations_json`: the tool's MCP annotations (an object of
--   booleans, in name order) as the gateway sent them.
-- * `run_overdue`: the run's `unknown` is the service's own (no report came by the
--   route's `expect_outcome_seconds`), not a reporter's; every `unknown` stored so far
--   is one.
-- * Windows are keyed by server too ('' for none: a server's name is never empty), so
--   an approval of a call to one server never lets the same call to another through.
--   SQLite cannot change a primary key in place: the table is rebuilt, every window so
--   far taking no server.

PRAGMA foreign_keys = OFF;

BEGIN;

ALTER TABLE confirmations ADD COLUMN server TEXT;
ALTER TABLE confirmations ADD COLUMN annotations_json TEXT;
ALTER TABLE confirmations ADD COLUMN run_overdue INTEGER NOT NULL DEFAULT 0;
UPDATE confirmations SET run_overdue = 1 WHERE run_status = 'unknown';

CREATE TABLE windows_new (
    agent          TEXT NOT NULL,
    route          TEXT NOT NULL,
    owner_id       TEXT NOT NULL,
    tool           TEXT NOT NULL,
    args_hash      TEXT NOT NULL,
    server         TEXT NOT NULL DEFAULT '',
    expires_at     INTEGER NOT NULL,
    opened_by      TEXT NOT NULL REFERENCES confirmations (id),
    PRIMARY KEY (agent, route, owner_id, tool, args_hash, server)
);

INSERT INTO windows_new (agent, route, owner_id, tool, args_hash, server, expires_at, opened_by)
SELECT agent, route, owner_id, tool, args_hash, '', expires_at, opened_by FROM windows;

DROP TABLE windows;
ALTER TABLE windows_new RENAME TO windows;
CREATE INDEX windows_expiry ON windows (expires_at);

PRAGMA foreign_key_check;

COMMIT;

PRAGMA foreign_keys = ON;
