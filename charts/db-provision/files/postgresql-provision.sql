-- Provisions one service: its role (LOGIN, with its password) and its
-- database, owned by the role and closed to everyone else. Run by
-- postgresql-provision.sh with psql 15 or later, which reads the values
-- from the environment (\getenv): ONPREM_USERNAME, ONPREM_PASSWORD,
-- ONPREM_DATABASE. Every statement is built by format() (%I quotes names,
-- %L the password) and run by \gexec, so any value is safe.
\set ON_ERROR_STOP on
\set VERBOSITY terse
\getenv username ONPREM_USERNAME
\getenv password ONPREM_PASSWORD
\getenv database ONPREM_DATABASE

SELECT current_setting('is_superuser') = 'on' AS is_superuser \gset

-- A superuser keeps these statements, which hold the password, out of the
-- server's log, even when one fails.
\if :is_superuser
SET log_statement = 'none';
SET log_min_duration_statement = -1;
SET log_min_error_statement = 'panic';
\endif

-- Never take over the admin role, a superuser, or a database of the server.
SELECT coalesce(bool_or(rolsuper OR rolname = current_user), false) AS refused
FROM pg_roles WHERE rolname = :'username' \gset
\if :refused
DO $$ BEGIN RAISE EXCEPTION 'the role of this service is a superuser or the admin role: refusing to change it'; END $$;
\endif
SELECT :'database' IN ('postgres', 'template0', 'template1') AS refused \gset
\if :refused
DO $$ BEGIN RAISE EXCEPTION 'the database of this service belongs to the server: refusing to give it away'; END $$;
\endif

-- The role: created if missing, else given the password (and LOGIN) again.
SELECT format('CREATE ROLE %I WITH LOGIN PASSWORD %L', :'username', :'password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'username') \gexec
SELECT format('ALTER ROLE %I WITH LOGIN PASSWORD %L', :'username', :'password') \gexec

-- An admin that is not a superuser (a managed service's) must be a member
-- of the role to make it a database's owner.
\if :is_superuser
\else
SELECT format('GRANT %I TO CURRENT_USER', :'username')
WHERE NOT pg_has_role(current_user, :'username', 'MEMBER') \gexec
\endif

-- The database: created if missing, owned by the role; only its owner (and
-- superusers) may connect.
SELECT format('CREATE DATABASE %I OWNER %I', :'database', :'username')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'database') \gexec
SELECT format('ALTER DATABASE %I OWNER TO %I', :'database', :'username') \gexec
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', :'database') \gexec
