// Grants or revokes one admin login of MongoDB: a user of the admin
// database with the root role. `onprem rotate credentials --admin` runs it
// in MongoDB's pod, with mongosh --nodb --norc --quiet --file, to
// alternate the admin between two users (see installer/rotate).
//
// What to do: ONPREM_ADMIN_ACTION, "grant" or "revoke". Whom: the username
// (and, to grant, the password) in the files of ONPREM_LOGIN_DIR. Grant
// creates the user, or gives an existing one the password and the role
// again; revoke drops the user (one that does not exist is revoked
// already) and refuses to drop the user it runs as.
//
// Where to connect: MONGODB_HOST, MONGODB_PORT, MONGODB_TLS ("true": TLS).
// As whom: MONGODB_ADMIN_USERNAME and MONGODB_ADMIN_PASSWORD. No
// credential is ever printed, and none is put in a connection string.

const fs = require('fs');

function log(message) {
  print('onprem rotate: mongodb: ' + message);
}

function env(name) {
  const value = process.env[name];
  if (value === undefined || value === '') {
    throw new Error('environment variable ' + name + ' is not set');
  }
  return value;
}

function loginValue(key) {
  const value = fs.readFileSync(env('ONPREM_LOGIN_DIR') + '/' + key, 'utf8');
  if (value === '') {
    throw new Error('the ' + key + ' of the admin login is empty');
  }
  return value;
}

function connect() {
  let host = env('MONGODB_HOST');
  if (host.indexOf(':') >= 0 && host.charAt(0) !== '[') {
    host = '[' + host + ']';
  }
  const tls = String(process.env.MONGODB_TLS || '').toLowerCase() === 'true';
  // MONGODB_REPLICA_SET (high availability, set on the members): the
  // user is changed on the set's primary, wherever this runs.
  const replicaSet = process.env.MONGODB_REPLICA_SET || '';
  const uri = 'mongodb://' + host + ':' + env('MONGODB_PORT') +
    '/admin?serverSelectionTimeoutMS=5000&connectTimeoutMS=5000' + (tls ? '&tls=true' : '') +
    (replicaSet ? '&replicaSet=' + encodeURIComponent(replicaSet) : '');
  const conn = new Mongo(uri);
  conn.getDB('admin').auth(env('MONGODB_ADMIN_USERNAME'), env('MONGODB_ADMIN_PASSWORD'));
  return conn;
}

const action = env('ONPREM_ADMIN_ACTION');
const username = loginValue('username');
const admin = connect().getDB('admin');
const what = 'admin user ' + JSON.stringify(username);
if (action === 'grant') {
  const roles = [{ role: 'root', db: 'admin' }];
  if (admin.getUser(username) === null) {
    admin.createUser({ user: username, pwd: loginValue('password'), roles: roles });
    log('created ' + what);
  } else {
    admin.updateUser(username, { pwd: loginValue('password'), roles: roles });
    log('updated ' + what);
  }
} else if (action === 'revoke') {
  if (username === env('MONGODB_ADMIN_USERNAME')) {
    throw new Error('refusing to revoke ' + what + ': the script runs as that user');
  }
  if (admin.getUser(username) === null) {
    log(what + ' does not exist: revoked already');
  } else {
    admin.dropUser(username);
    log('dropped ' + what);
  }
} else {
  throw new Error('ONPREM_ADMIN_ACTION is ' + JSON.stringify(action) + ', not grant or revoke');
}
