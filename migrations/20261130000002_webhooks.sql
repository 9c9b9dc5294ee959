-- Signed webhooks to agents, through an outbox written in the same transaction as the
-- decision (so a committed outcome can never miss its webhook), and route chat moves
-- (a group upgraded to a supergroup keeps working after a restart).

ALTER TABLE confirmations ADD COLUMN callback_url TEXT;

CREATE TABLE webhook_outbox (
    -- Stable across retries: receivers de-duplicate on it (header X-Hitl-Delivery).
    delivery_id     TEXT PRIMARY KEY NOT NULL,
    confirmation_id TEXT NOT NULL REFERENCES confirmations (id),
    agent           TEXT NOT NULL,
    url             TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'given_up')),
    finished_at     INTEGER
);

CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) WHERE state = 'pending';

CREATE TABLE route_chats (
    route      TEXT PRIMARY KEY NOT NULL,
    chat_id    INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
