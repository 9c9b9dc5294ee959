-- Telegram out of reach (issue 50). Times are Unix epoch milliseconds.
--
-- `telegram_outages`: one row per outage the leader took as one (Telegram failed every
-- probe for longer than `[telegram] outage_after_seconds`): since the first failed probe,
-- until the first probe that answered (`ended_at`, NULL while it lasts). At most one is
-- open (the partial unique index), so a restarted leader or a new one reads it back and
-- announces its end, never a second beginning.
CREATE TABLE telegram_outages (
    id       TEXT PRIMARY KEY NOT NULL,
    since    INTEGER NOT NULL,
    began_at INTEGER NOT NULL,
    ended_at INTEGER
);

CREATE UNIQUE INDEX telegram_outages_one_open ON telegram_outages ((ended_at IS NULL))
    WHERE ended_at IS NULL;

-- `outage_alerts`: the fallback URL's deliveries, queued in the transaction that stores
-- the outage's beginning or end, and attempted like the agents' webhooks: `body` is the
-- JSON sent (as stored, so every retry signs the same bytes), `delivery_id` the
-- `X-Hitl-Delivery` header, stable across retries.
CREATE TABLE outage_alerts (
    delivery_id     TEXT PRIMARY KEY NOT NULL,
    outage_id       TEXT NOT NULL REFERENCES telegram_outages (id),
    kind            TEXT NOT NULL CHECK (kind IN ('telegram_outage_started', 'telegram_outage_ended')),
    url             TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'given_up')),
    finished_at     INTEGER,
    UNIQUE (outage_id, kind)
);

CREATE INDEX outage_alerts_due ON outage_alerts (next_attempt_at) WHERE state = 'pending';
