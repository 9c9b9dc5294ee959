-- Telegram out of reach (issue 50): the tables of the SQLite migration of the same name,
-- whose header says what each column is for, with PostgreSQL's types.
CREATE TABLE telegram_outages (
    id       TEXT PRIMARY KEY NOT NULL,
    since    BIGINT NOT NULL,
    began_at BIGINT NOT NULL,
    ended_at BIGINT
);

CREATE UNIQUE INDEX telegram_outages_one_open ON telegram_outages ((ended_at IS NULL))
    WHERE ended_at IS NULL;

CREATE TABLE outage_alerts (
    delivery_id     TEXT PRIMARY KEY NOT NULL,
    outage_id       TEXT NOT NULL REFERENCES telegram_outages (id),
    kind            TEXT NOT NULL CHECK (kind IN ('telegram_outage_started', 'telegram_outage_ended')),
    url             TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    last_error      TEXT,
    state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'given_up')),
    finished_at     BIGINT,
    UNIQUE (outage_id, kind)
);

CREATE INDEX outage_alerts_due ON outage_alerts (next_attempt_at) WHERE state = 'pending';
