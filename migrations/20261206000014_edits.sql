-- Edit before execute (issue 37, the console).
-- * `args_schema`: the tool's JSON Schema the agent sent with the call (checked when it
--   came in); with `allow_edit`, the console's form is built from it and an edit is
--   checked against it.
-- * `original_params_json`, `original_args_hash`: set, together with the new
--   `params_json` and `args_hash`, by the decision that approved the call with changes:
--   what the agent asked for. Both or neither.
ALTER TABLE confirmations ADD COLUMN args_schema TEXT;
ALTER TABLE confirmations ADD COLUMN original_params_json TEXT;
ALTER TABLE confirmations ADD COLUMN original_args_hash TEXT;
