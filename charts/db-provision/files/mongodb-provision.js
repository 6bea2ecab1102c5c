// Gives every service named in mongodb-services its own MongoDB user with
// the readWrite role on its own database. The user, password and database
// come from the service's Secret onprem-<service>-mongodb (keys username,
// password, database), mounted at /var/run/onprem/mongodb/<service>/. The
// user is created in the service's database, which is therefore also its
// authentication database (a connection string naming the database needs
// no authSource).
//
// Idempotent: a missing user is created; an existing one gets the Secret's
// password and roles again, so that re-runs converge. MongoDB creates the
// database itself on the service's first write.
//
// `onprem rotate credentials` runs this same script in MongoDB's pod for
// one login, with the two paths below moved to a private folder of its
// own by ONPREM_SERVICES_FILE and ONPREM_SECRETS_DIR.
//
// Run with `mongosh --nodb --file`. Where to connect: MONGODB_HOST,
// MONGODB_PORT, MONGODB_TLS ("true": TLS). As whom: MONGODB_ADMIN_USERNAME
// and MONGODB_ADMIN_PASSWORD, a user allowed to manage users. No credential
// is ever printed, and none is put in a connection string (mongosh may log
// those).
//
// Written for mongosh's script runner: plain loops rather than callbacks
// (forEach, map) around shell calls, which mongosh would not wait for.

const fs = require('fs');

const SERVICES_FILE = process.env.ONPREM_SERVICES_FILE || '/etc/onprem/db-provision/mongodb-services';
const SECRETS_DIR = process.env.ONPREM_SECRETS_DIR || '/var/run/onprem/mongodb';
// Databases that belong to the server, never to a service.
const RESERVED_DATABASES = ['admin', 'local', 'config'];
// Connection attempts, PAUSE_MS apart: the server may still be starting.
const ATTEMPTS = 60;
const PAUSE_MS = 5000;
// Authentication failures: the credentials are wrong, retrying won't help.
const AUTH_ERROR_CODES = [13, 18];

function log(message) {
  print('db-provision: mongodb: ' + message);
}

function env(name) {
  const value = process.env[name];
  if (value === undefined || value === '') {
    throw new Error('environment variable ' + name + ' is not set');
  }
  return value;
}

// The exact content of one key of a service's Secret: the value the service
// itself reads (no trimming).
function secretValue(service, key) {
  const value = fs.readFileSync(SECRETS_DIR + '/' + service + '/' + key, 'utf8');
  if (value === '') {
    throw new Error('key ' + key + ' of the MongoDB Secret of ' + service + ' is empty');
  }
  return value;
}

function serviceNames() {
  const names = [];
  const lines = fs.readFileSync(SERVICES_FILE, 'utf8').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const name = lines[i].trim();
    if (name !== '') {
      names.push(name);
    }
  }
  return names;
}

function connect() {
  let host = env('MONGODB_HOST');
  if (host.indexOf(':') >= 0 && host.charAt(0) !== '[') {
    host = '[' + host + ']'; // an IPv6 address
  }
  const port = env('MONGODB_PORT');
  const tls = String(process.env.MONGODB_TLS || '').toLowerCase() === 'true';
  const where = host + ':' + port;
  // MONGODB_REPLICA_SET (high availability): the host is a seed of the
  // set, and the writes go to its primary (mongosh would otherwise talk to
  // the one host it was given).
  const replicaSet = process.env.MONGODB_REPLICA_SET || '';
  const uri = 'mongodb://' + where + '/admin?serverSelectionTimeoutMS=5000&connectTimeoutMS=5000' +
    (tls ? '&tls=true' : '') + (replicaSet ? '&replicaSet=' + encodeURIComponent(replicaSet) : '');
  let lastError = null;
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    try {
      const conn = new Mongo(uri);
      const admin = conn.getDB('admin');
      admin.auth(env('MONGODB_ADMIN_USERNAME'), env('MONGODB_ADMIN_PASSWORD'));
      admin.runCommand({ ping: 1 });
      log('connected to ' + where);
      return conn;
    } catch (e) {
      if (e && AUTH_ERROR_CODES.indexOf(e.code) >= 0) {
        throw new Error('the admin user cannot log in to ' + where + ': ' + e.message);
      }
      lastError = e;
      log('cannot reach ' + where + ' yet (attempt ' + attempt + ' of ' + ATTEMPTS + '): ' + errorMessage(e));
      if (attempt < ATTEMPTS) {
        sleep(PAUSE_MS);
      }
    }
  }
  throw new Error('cannot reach ' + where + ': ' + errorMessage(lastError));
}

function provision(conn, service) {
  const username = secretValue(service, 'username');
  const password = secretValue(service, 'password');
  const database = secretValue(service, 'database');
  if (RESERVED_DATABASES.indexOf(database) >= 0) {
    throw new Error('the MongoDB Secret of ' + service + ' names the database ' +
      JSON.stringify(database) + ', which belongs to the server');
  }
  const serviceDB = conn.getDB(database);
  const roles = [{ role: 'readWrite', db: database }];
  const what = 'user ' + JSON.stringify(username) + ' of database ' + JSON.stringify(database) +
    ' for ' + service;
  if (serviceDB.getUser(username) === null) {
    serviceDB.createUser({ user: username, pwd: password, roles: roles });
    log('created ' + what);
  } else {
    serviceDB.updateUser(username, { pwd: password, roles: roles });
    log('updated ' + what);
  }
}

function errorMessage(e) {
  return e && e.message ? e.message : String(e);
}

function main() {
  const services = serviceNames();
  if (services.length === 0) {
    log('no service uses MongoDB');
    return;
  }
  const conn = connect();
  for (let i = 0; i < services.length; i++) {
    provision(conn, services[i]);
  }
  log('done: ' + services.length + ' service(s)');
}

try {
  main();
} catch (e) {
  log('failed: ' + errorMessage(e));
  quit(1);
}
