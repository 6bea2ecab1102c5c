-- Provisions one service: its login role (LOGIN, with its password) and
-- its database, owned by the owner role and closed to everyone else. Run
-- by postgresql-provision.sh with psql 15 or later, which reads the values
-- from the environment (\getenv): ONPREM_USERNAME, ONPREM_PASSWORD,
-- ONPREM_DATABASE and ONPREM_OWNER. `onprem rotate credentials` runs the
-- same file with the values set (\set) before it instead.
--
-- The owner is the login itself until a rotation: the login then
-- alternates between the owner and a second role that is a member of the
-- owner and becomes it in each session (ALTER ROLE ... SET role), so that
-- whichever login the service uses, what it creates belongs to the owner.
--
-- Every statement is built by format() (%I quotes names, %L the password)
-- and run by \gexec, so any value is safe.
\set ON_ERROR_STOP on
\set VERBOSITY terse
\getenv username ONPREM_USERNAME
\getenv password ONPREM_PASSWORD
\getenv database ONPREM_DATABASE
\getenv owner ONPREM_OWNER
\if :{?owner}
\else
\set owner :username
\endif
SELECT :'owner' <> :'username' AS second_login \gset

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
FROM pg_roles WHERE rolname IN (:'username', :'owner') \gset
\if :refused
DO $$ BEGIN RAISE EXCEPTION 'the role of this service is a superuser or the admin role: refusing to change it'; END $$;
\endif
SELECT :'database' IN ('postgres', 'template0', 'template1') AS refused \gset
\if :refused
DO $$ BEGIN RAISE EXCEPTION 'the database of this service belongs to the server: refusing to give it away'; END $$;
\endif

-- The owner, when the login is another role: created if missing, without
-- LOGIN (a rotation gives it back when the login alternates to it).
\if :second_login
SELECT format('CREATE ROLE %I NOLOGIN', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'owner') \gexec
\endif

-- The login: created if missing, else given the password (and LOGIN) again.
SELECT format('CREATE ROLE %I WITH LOGIN PASSWORD %L', :'username', :'password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'username') \gexec
SELECT format('ALTER ROLE %I WITH LOGIN PASSWORD %L', :'username', :'password') \gexec

-- A second login acts as the owner: a member of it, and the owner in every
-- session it opens.
\if :second_login
SELECT format('GRANT %I TO %I', :'owner', :'username')
WHERE NOT pg_has_role(:'username', :'owner', 'MEMBER') \gexec
SELECT format('ALTER ROLE %I SET role = %I', :'username', :'owner') \gexec
\endif

-- An admin that is not a superuser (a managed service's) must be a member
-- of the owner to make it a database's owner.
\if :is_superuser
\else
SELECT format('GRANT %I TO CURRENT_USER', :'owner')
WHERE NOT pg_has_role(current_user, :'owner', 'MEMBER') \gexec
\endif

-- The database: created if missing, owned by the owner; only its owner,
-- its members (and superusers) may connect.
SELECT format('CREATE DATABASE %I OWNER %I', :'database', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'database') \gexec
SELECT format('ALTER DATABASE %I OWNER TO %I', :'database', :'owner') \gexec
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', :'database') \gexec
