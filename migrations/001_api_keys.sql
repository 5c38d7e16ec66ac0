-- tollgate: API keys in PostgreSQL (issue 5). Apply with:
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f migrations/001_api_keys.sql
-- Idempotent: applying it again changes nothing. PostgreSQL 11 or later.
--
-- The gateway loads every active key into memory at start and follows changes through
-- LISTEN/NOTIFY on the channel 'tollgate_api_keys' (payload: the key_id; '*' after a
-- TRUNCATE), with a full resync on a timer and after every reconnect. Revoking a key
-- (UPDATE api_keys SET status = 'revoked' WHERE key_id = ...) takes effect within a second.

BEGIN;

CREATE TABLE IF NOT EXISTS api_keys (
  -- Lowercase hex SHA-256 of the key: the key itself is never stored.
  key_sha256 char(64) PRIMARY KEY CHECK (key_sha256 ~ '^[0-9a-f]{64}$'),
  -- Shown in logs and metrics instead of the key. At most 200 characters: it is the NOTIFY
  -- payload, which PostgreSQL limits to 8000 bytes.
  key_id text NOT NULL UNIQUE CHECK (key_id <> '' AND length(key_id) <= 200),
  account_id text NOT NULL,  -- plans with `scope: account` count per account
  plan text NOT NULL,        -- a plan of the gateway's config; another name gets the strictest
  status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
  -- Used by plan limits marked `from_key: true`: at most rate_limit_per_minute +
  -- rate_limit_burst requests in any 60 s (sliding-window log). The gateway refuses
  -- per_minute < 1 or burst < 0 for the row (logged, counted) and applies the plan's own limit.
  rate_limit_per_minute integer NOT NULL DEFAULT 600,
  rate_limit_burst integer NOT NULL DEFAULT 100,
  -- Per-key changes to plan limits, with the fields of the YAML overrides, e.g.
  -- {"burst": {"capacity": 5000, "refill_per_second": 120, "expires": "2026-12-31"}}.
  -- Overrides that do not fit the key's plan are ignored for that key (logged, counted).
  overrides jsonb NULL CHECK (overrides IS NULL OR jsonb_typeof(overrides) = 'object'),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Tells the gateways which key changed. On UPDATE both ids are sent, so a renamed key_id
-- leaves no stale entry behind; PostgreSQL folds identical notifications of one transaction.
CREATE OR REPLACE FUNCTION tollgate_api_keys_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    PERFORM pg_notify('tollgate_api_keys', '*');
    RETURN NULL;
  END IF;
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    PERFORM pg_notify('tollgate_api_keys', OLD.key_id);
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    PERFORM pg_notify('tollgate_api_keys', NEW.key_id);
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION tollgate_api_keys_touch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.updated_at := now();
  RETURN NEW;
END
$$;

-- DROP + CREATE in this transaction: CREATE OR REPLACE TRIGGER needs PostgreSQL 14.
DROP TRIGGER IF EXISTS tollgate_api_keys_notify ON api_keys;
CREATE TRIGGER tollgate_api_keys_notify
  AFTER INSERT OR UPDATE OR DELETE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION tollgate_api_keys_notify();

DROP TRIGGER IF EXISTS tollgate_api_keys_notify_truncate ON api_keys;
CREATE TRIGGER tollgate_api_keys_notify_truncate
  AFTER TRUNCATE ON api_keys
  FOR EACH STATEMENT EXECUTE FUNCTION tollgate_api_keys_notify();

DROP TRIGGER IF EXISTS tollgate_api_keys_touch ON api_keys;
CREATE TRIGGER tollgate_api_keys_touch
  BEFORE UPDATE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION tollgate_api_keys_touch();

COMMIT;
