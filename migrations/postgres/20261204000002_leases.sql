-- Work that must happen once across replicas (deadlines, posting questions, the webhook
-- outbox, the Redis bridge, Telegram long polling) is done by the replica that holds
-- the `leader` lease. A lease is held until `expires_at` (the database's clock, so the
-- replicas' clocks never have to agree) and renewed well before then; a replica that
-- dies stops renewing, and another takes the lease once it has expired.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
