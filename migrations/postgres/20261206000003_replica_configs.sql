-- Several replicas on one database must agree on who may decide (issue 33). Each live
-- replica records what its configuration says about it: `view` is the JSON of its
-- authorisation view (routes with their chats and approvers, escalations, people,
-- owner ids, agents with their routes; never a secret nor a token's digest) and
-- `fingerprint` the SHA-256 of that text. A row is renewed like the leader's lease and
-- holds until `expires_at` (the database's clock); a replica that dies stops renewing,
-- and its configuration stops counting once the row has expired. While the live rows'
-- fingerprints differ, an operator's action counts only if every one of them allows it.
CREATE TABLE replica_configs (
    holder      TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    view        TEXT NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
