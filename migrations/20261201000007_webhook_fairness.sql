-- Fair webhooks (issue 13):
-- * `dropped`: a delivery that was never queued because its agent already had
--   `webhooks.max_backlog_per_agent` undelivered ones. The row is kept (with its audit
--   event `webhook_dropped`) so the metrics and an operator can see what was not sent.
-- * Per-agent indexes on pending rows: the bound is checked in the decision's own
--   transaction, and the worker picks each agent's oldest due rows.
--
-- SQLite cannot change a CHECK constraint in place, so the table is rebuilt. Nothing
-- references `webhook_outbox`, so foreign keys can stay on and the rebuild is one
-- ordinary migration transaction.

CREATE TABLE webhook_outbox_new (
    -- Stable across retries: receivers de-duplicate on it (header X-Hitl-Delivery).
    delivery_id     TEXT PRIMARY KEY NOT NULL,
    confirmation_id TEXT NOT NULL REFERENCES confirmations (id),
    agent           TEXT NOT NULL,
    url             TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    state           TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'delivered', 'given_up', 'dropped')),
    finished_at     INTEGER
);

INSERT INTO webhook_outbox_new (delivery_id, confirmation_id, agent, url, created_at,
    next_attempt_at, attempts, last_error, state, finished_at)
SELECT delivery_id, confirmation_id, agent, url, created_at,
    next_attempt_at, attempts, last_error, state, finished_at
FROM webhook_outbox ORDER BY rowid;

DROP TABLE webhook_outbox;
ALTER TABLE webhook_outbox_new RENAME TO webhook_outbox;

CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_outbox_agent_pending ON webhook_outbox (agent, next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_outbox_dropped ON webhook_outbox (agent) WHERE state = 'dropped';
