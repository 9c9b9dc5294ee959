-- no-transaction
-- What an operator approves is bounded and visible (issue 12):
-- * `window_requested_seconds`: what the agent asked for when the route's
--   `max_window_seconds` cut it (NULL when the window is as asked); `window_seconds`
--   stays the effective window the question offered.
-- * `approved_once`: the operator tapped "Approve once": confirmed, but no window opens.
-- * `answers.once`: see below.
-- * `has_call`: an interaction that carries a tool call (tool, owner, params), shown
--   like a confirmation.
-- * Windows are keyed by route too, so an approval on one route (its approvers) never
--   lets calls through on another route with other approvers. SQLite cannot change a
--   primary key in place: the table is rebuilt, each window taking the route of the
--   request that opened it.

PRAGMA foreign_keys = OFF;

BEGIN;

ALTER TABLE confirmations ADD COLUMN window_requested_seconds INTEGER;
ALTER TABLE confirmations ADD COLUMN approved_once INTEGER NOT NULL DEFAULT 0;
ALTER TABLE confirmations ADD COLUMN has_call INTEGER NOT NULL DEFAULT 0;
-- An approving answer to an interaction's call given with "Approve once" (AI-Parrot's
-- guard then records no window: the HumanResponse says so in its metadata).
ALTER TABLE answers ADD COLUMN once INTEGER NOT NULL DEFAULT 0;

CREATE TABLE windows_new (
    agent          TEXT NOT NULL,
    route          TEXT NOT NULL,
    owner_id       TEXT NOT NULL,
    tool           TEXT NOT NULL,
    args_hash      TEXT NOT NULL,
    expires_at     INTEGER NOT NULL,
    opened_by      TEXT NOT NULL REFERENCES confirmations (id),
    PRIMARY KEY (agent, route, owner_id, tool, args_hash)
);

INSERT INTO windows_new (agent, route, owner_id, tool, args_hash, expires_at, opened_by)
SELECT w.agent, c.route, w.owner_id, w.tool, w.args_hash, w.expires_at, w.opened_by
FROM windows w JOIN confirmations c ON c.id = w.opened_by;

DROP TABLE windows;
ALTER TABLE windows_new RENAME TO windows;
CREATE INDEX windows_expiry ON windows (expires_at);

PRAGMA foreign_key_check;

COMMIT;

PRAGMA foreign_keys = ON;
