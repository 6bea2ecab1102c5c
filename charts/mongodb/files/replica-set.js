// Initiates the MongoDB replica set and keeps its members those of the
// StatefulSet (global.availability high). Run by the Job mongodb-replica-set
// with `mongosh --nodb --file` on every install and upgrade; idempotent: a
// set that already has the wanted members is left as it is.
//
// MONGODB_REPLICA_SET names the set; MONGODB_MEMBERS lists the members as
// the set's configuration names them (host:port, comma-separated, in the
// StatefulSet's order). The admin user and password are read from the
// files of the mounted Secret (ONPREM_MONGO_ADMIN_DIR, /etc/mongodb-admin);
// no credential is printed or put in a connection string.
//
// The steps, each safe to repeat after a crash:
//   1. Ask every member what it is. A member of another set stops the
//      Job: it never guesses.
//   2. No member has a configuration yet (a first install): once every
//      member answers, initiate the set on the first member alone (the
//      others already hold their own admin user, and a member with data
//      cannot be named in an initiation), and wait until it is primary.
//      If some member does not answer, do not initiate: it may hold the
//      set, and a second set of the same name would split the data.
//   3. On the primary, add each wanted member that the configuration
//      lacks, one per reconfiguration (MongoDB changes one voting member
//      at a time), each once it answers; it copies the data from the set
//      (initial sync) and drops what it held. Then remove members the
//      StatefulSet no longer runs, one at a time (a primary among them is
//      first asked to step down).
//   4. Wait until every wanted member is PRIMARY or SECONDARY: the set
//      survives the loss of any one member when the Job succeeds.
//
// Written for mongosh's script runner: plain loops rather than callbacks
// around shell calls, which mongosh would not wait for.

const fs = require('fs');

const SET = env('MONGODB_REPLICA_SET');
const MEMBERS = env('MONGODB_MEMBERS').split(',').map(function (m) { return m.trim(); }).filter(function (m) { return m !== ''; });
const ADMIN_DIR = process.env.ONPREM_MONGO_ADMIN_DIR || '/etc/mongodb-admin';
// How long the Job waits for what it needs (members answering, a primary,
// members catching up) before it fails with what it waited for.
const WAIT_MS = Number(process.env.ONPREM_WAIT_SECONDS || '600') * 1000;
const PAUSE_MS = 2000;
// Authentication failures: the credentials are wrong, retrying won't help.
const AUTH_ERROR_CODES = [13, 18];
// replSetGetStatus/replSetGetConfig on a member without a configuration.
const NOT_YET_INITIALIZED = 94;

function log(message) {
  print('mongodb-replica-set: ' + message);
}

function env(name) {
  const value = process.env[name];
  if (value === undefined || value === '') {
    throw new Error('environment variable ' + name + ' is not set');
  }
  return value;
}

function adminFile(key) {
  const value = fs.readFileSync(ADMIN_DIR + '/' + key, 'utf8');
  if (value === '') {
    throw new Error('key ' + key + ' of the MongoDB admin Secret is empty');
  }
  return value;
}

function errorMessage(e) {
  return e && e.message ? e.message : String(e);
}

// runs a command; returns the reply, or an object {ok: 0, code, errmsg}
// whether mongosh throws on a failed command or returns it.
function command(admin, cmd) {
  try {
    const r = admin.runCommand(cmd);
    return r;
  } catch (e) {
    if (e && AUTH_ERROR_CODES.indexOf(e.code) >= 0) {
      throw e;
    }
    return { ok: 0, code: e && e.code, errmsg: errorMessage(e) };
  }
}

// connects to one member only (no discovery), as the admin; null when it
// does not answer.
function member(host) {
  try {
    const conn = new Mongo('mongodb://' + host + '/admin?directConnection=true&serverSelectionTimeoutMS=3000&connectTimeoutMS=3000');
    const admin = conn.getDB('admin');
    admin.auth(adminFile('username'), adminFile('password'));
    return admin;
  } catch (e) {
    if (e && AUTH_ERROR_CODES.indexOf(e.code) >= 0) {
      throw new Error('the admin user cannot log in to ' + host + ': ' + e.message);
    }
    return null;
  }
}

// what one member says of itself: {host, up, set, primary, writable}.
function survey(host) {
  const admin = member(host);
  if (admin === null) {
    return { host: host, up: false };
  }
  const hello = command(admin, { hello: 1 });
  if (!hello.ok) {
    return { host: host, up: false };
  }
  if (hello.setName !== undefined && hello.setName !== SET) {
    throw new Error(host + ' is a member of replica set ' + JSON.stringify(hello.setName) +
      ', not ' + JSON.stringify(SET) + ': its volume holds another set; the Job changes nothing. ' +
      'Fix: restore that member\'s volume from a backup, or delete the pod and its claim (data-' + host.split('.')[0] +
      ') so that it starts empty and copies the set, then run onprem install again');
  }
  return {
    host: host,
    up: true,
    set: hello.setName === SET,
    primary: hello.primary || '',
    writable: hello.isWritablePrimary === true,
    admin: admin,
  };
}

function surveyAll() {
  const out = [];
  for (let i = 0; i < MEMBERS.length; i++) {
    out.push(survey(MEMBERS[i]));
  }
  return out;
}

// waits until check() returns a value other than null, or fails naming
// what it waited for.
function waitFor(what, check) {
  const deadline = Date.now() + WAIT_MS;
  let attempt = 0;
  for (;;) {
    const v = check();
    if (v !== null) {
      return v;
    }
    attempt++;
    if (Date.now() > deadline) {
      throw new Error('gave up after ' + Math.round(WAIT_MS / 1000) + ' s waiting for ' + what +
        ': see which member is not running (onprem status, onprem doctor), bring it back, then run onprem install again');
    }
    if (attempt % 10 === 1) {
      log('waiting for ' + what);
    }
    sleep(PAUSE_MS);
  }
}

function down(members) {
  const out = [];
  for (let i = 0; i < members.length; i++) {
    if (!members[i].up) {
      out.push(members[i].host);
    }
  }
  return out;
}

// the writable primary of the set, as a connection, or null.
function primary() {
  const members = surveyAll();
  for (let i = 0; i < members.length; i++) {
    if (members[i].up && members[i].writable) {
      return members[i].admin;
    }
  }
  return null;
}

function initiate() {
  const members = waitFor('every member to answer before the set is initiated (' + MEMBERS.join(', ') + ')', function () {
    const m = surveyAll();
    for (let i = 0; i < m.length; i++) {
      if (m[i].up && m[i].set) {
        return m; // another run initiated it meanwhile
      }
    }
    return down(m).length === 0 ? m : null;
  });
  for (let i = 0; i < members.length; i++) {
    if (members[i].set) {
      return;
    }
  }
  const first = members[0];
  const r = command(first.admin, { replSetInitiate: { _id: SET, members: [{ _id: 0, host: MEMBERS[0] }] } });
  if (!r.ok && r.code !== 23) { // 23: AlreadyInitialized
    throw new Error('initiating replica set ' + SET + ' on ' + MEMBERS[0] + ': ' + r.errmsg);
  }
  log('initiated replica set ' + SET + ' on ' + MEMBERS[0]);
}

function config(admin) {
  const r = command(admin, { replSetGetConfig: 1 });
  if (!r.ok) {
    throw new Error('reading the replica set configuration: ' + r.errmsg);
  }
  return r.config;
}

// reconfigurations on the primary until change(cfg, admin) has nothing
// left to do: it edits the configuration and returns a description, or
// returns null (done) or RETRY (ask again, the primary may change).
const RETRY = {};
function reconfigure(change) {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const admin = waitFor('a writable primary', primary);
    const cfg = config(admin);
    const what = change(cfg, admin);
    if (what === null) {
      return;
    }
    if (what !== RETRY) {
      cfg.version = cfg.version + 1;
      const r = command(admin, { replSetReconfig: cfg, maxTimeMS: 60000 });
      if (r.ok) {
        log(what);
        continue;
      }
      // Another configuration still committing, or the primary stepped
      // down: read again and retry.
      if (Date.now() > deadline) {
        throw new Error(what + ': ' + r.errmsg);
      }
      log(what + ': not yet (' + r.errmsg + '), retrying');
    }
    if (Date.now() > deadline) {
      throw new Error('gave up after ' + Math.round(WAIT_MS / 1000) + ' s reconfiguring replica set ' + SET);
    }
    sleep(PAUSE_MS);
  }
}

function hostsOf(cfg) {
  const out = [];
  for (let i = 0; i < cfg.members.length; i++) {
    out.push(cfg.members[i].host);
  }
  return out;
}

function addMissing(cfg) {
  const have = hostsOf(cfg);
  for (let i = 0; i < MEMBERS.length; i++) {
    if (have.indexOf(MEMBERS[i]) >= 0) {
      continue;
    }
    waitFor(MEMBERS[i] + ' to answer before it joins', function () {
      return survey(MEMBERS[i]).up ? true : null;
    });
    let id = 0;
    for (let j = 0; j < cfg.members.length; j++) {
      id = Math.max(id, cfg.members[j]._id + 1);
    }
    cfg.members.push({ _id: id, host: MEMBERS[i] });
    return 'added ' + MEMBERS[i] + ' to replica set ' + SET;
  }
  return null;
}

function removeUnwanted(cfg, admin) {
  const self = command(admin, { hello: 1 }).me;
  for (let i = 0; i < cfg.members.length; i++) {
    if (MEMBERS.indexOf(cfg.members[i].host) < 0) {
      const host = cfg.members[i].host;
      if (host === self) {
        // A primary cannot remove itself: it hands over first.
        log(host + ' is primary but leaves the set: asking it to step down');
        command(admin, { replSetStepDown: 60 });
        return RETRY;
      }
      cfg.members.splice(i, 1);
      return 'removed ' + host + ', which the StatefulSet no longer runs, from replica set ' + SET;
    }
  }
  return null;
}

function caughtUp() {
  const admin = primary();
  if (admin === null) {
    return null;
  }
  const r = command(admin, { replSetGetStatus: 1 });
  if (!r.ok) {
    return null;
  }
  const states = {};
  for (let i = 0; i < r.members.length; i++) {
    states[r.members[i].name] = r.members[i].stateStr;
  }
  for (let i = 0; i < MEMBERS.length; i++) {
    const s = states[MEMBERS[i]];
    if (s !== 'PRIMARY' && s !== 'SECONDARY') {
      return null;
    }
  }
  return states;
}

function main() {
  if (MEMBERS.length === 0) {
    log('no members (the StatefulSet is stopped): nothing to do');
    return;
  }
  const members = surveyAll();
  let initiated = false;
  for (let i = 0; i < members.length; i++) {
    initiated = initiated || (members[i].up && members[i].set);
  }
  if (!initiated) {
    initiate();
  }
  reconfigure(addMissing);
  reconfigure(removeUnwanted);
  const states = waitFor('every member to be PRIMARY or SECONDARY', caughtUp);
  const parts = [];
  for (let i = 0; i < MEMBERS.length; i++) {
    parts.push(MEMBERS[i] + ' ' + states[MEMBERS[i]]);
  }
  log('replica set ' + SET + ': ' + parts.join(', '));
}

try {
  main();
} catch (e) {
  log('failed: ' + errorMessage(e));
  quit(1);
}
