-- Rules before the human (issue 35).
-- * `via = 'rule'`: a `[[rules]]` rule (or the rules' default) allowed or denied the call
--   without asking; `via = 'grant'`: the grant check (`grant_scope`) refused it (no live
--   grant) or let it through (`require_grant_only`).
-- * `rule`: the name of the rule that decided the call (NULL: the rules' default, or no
--   rules in force). Indexed with `created_at` for an `allow` rule's `rate`: how many
--   calls it let through in its period is counted here, so the count survives restarts
--   and is shared by replicas.
-- * `rule_json`: the whole verdict (effect, rule, reason, the rule set's fingerprint,
--   whether it was enforced or a dry run), as the API record and the message show it.
ALTER TABLE confirmations DROP CONSTRAINT confirmations_via_check;
ALTER TABLE confirmations ADD CONSTRAINT confirmations_via_check
    CHECK (via IN ('operator', 'window', 'timeout', 'withdrawn', 'fail_closed', 'rule', 'grant'));
ALTER TABLE confirmations ADD COLUMN rule TEXT;
ALTER TABLE confirmations ADD COLUMN rule_json TEXT;
CREATE INDEX confirmations_rule ON confirmations (rule, created_at) WHERE rule IS NOT NULL;
