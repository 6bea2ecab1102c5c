// Command mongo-entrypoint is the entrypoint of the e2e MongoDB stand-in
// (installed as /usr/local/bin/docker-entrypoint.sh): FerretDB with its
// SQLite backend, which speaks MongoDB's wire protocol. It honours the part
// of the official mongo image's contract that the mongodb chart relies on:
//
//   - MONGO_INITDB_ROOT_USERNAME and MONGO_INITDB_ROOT_PASSWORD (or their
//     _FILE forms) create that user in the admin database on the first
//     start (FerretDB's --setup-*: only when the admin database does not
//     exist yet); with them, authentication is on (SCRAM-SHA-1/256, a wrong
//     password is refused), as mongod's --auth;
//   - the arguments are mongod's: "mongod" (or flags alone) followed by
//     --bind_ip_all, --bind_ip ADDR, --port N, --auth, --noauth, --dbpath
//     DIR, and the storage-engine flags, which FerretDB has no use for
//     (--wiredTigerCacheSizeGB, ...); any other mongod flag is refused
//     rather than silently dropped. Any command other than mongod is run
//     as it is;
//   - the data lives in --dbpath (default /data/db, the chart's volume);
//   - started as root it gives /data/db and /data/configdb to the mongodb
//     user and becomes that user (the chart starts it as uid 999 directly).
//
// The password reaches FerretDB through its environment
// (FERRETDB_SETUP_PASSWORD), never its command line.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"onprem.dev/onprem/e2e/images/internal/entry"
)

// ferretdb is where the image keeps the server.
const ferretdb = "/usr/local/bin/ferretdb"

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"mongod"}
	}
	if strings.HasPrefix(args[0], "-") {
		args = append([]string{"mongod"}, args...)
	}
	if args[0] != "mongod" {
		if err := entry.Exec(args, os.Environ()); err != nil {
			entry.Fail("%v", err)
		}
	}
	argv, env, err := translate(args[1:], entry.Env)
	if err != nil {
		entry.Fail("%v", err)
	}
	if entry.IsRoot() {
		u, err := entry.LookupUser("mongodb")
		if err != nil {
			entry.Fail("%v", err)
		}
		if err := entry.StepDown(u, "/data/db", "/data/configdb"); err != nil {
			entry.Fail("becoming the mongodb user: %v", err)
		}
	}
	entry.Logf("running %s", strings.Join(argv, " "))
	if err := entry.Exec(argv, append(entry.EnvWithout("MONGO_INITDB_ROOT_USERNAME", "MONGO_INITDB_ROOT_PASSWORD"), env...)); err != nil {
		entry.Fail("%v", err)
	}
}

// ignored are mongod flags that only tune mongod's own storage engine or
// output, with the number of values each takes.
var ignored = map[string]int{
	"--wiredTigerCacheSizeGB": 1, "--wiredTigerCollectionBlockCompressor": 1, "--wiredTigerJournalCompressor": 1,
	"--journal": 0, "--nojournal": 0, "--quiet": 0, "--nounixsocket": 0, "--unixSocketPrefix": 1,
	"--oplogSize": 1, "--setParameter": 1,
}

// translate turns mongod's arguments (without "mongod") and the root
// user's variables into FerretDB's command line and environment.
func translate(args []string, getenv func(string) (string, error)) (argv, env []string, err error) {
	host, port, dbpath, auth := "127.0.0.1", 27017, "/data/db", false
	for i := 0; i < len(args); i++ {
		flag, value, hasValue := strings.Cut(args[i], "=")
		takeValue := func() (string, error) {
			if hasValue {
				return value, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("mongod flag %s needs a value", flag)
			}
			i++
			return args[i], nil
		}
		switch flag {
		case "--bind_ip_all":
			host = "0.0.0.0"
		case "--bind_ip":
			v, err := takeValue()
			if err != nil {
				return nil, nil, err
			}
			addrs := strings.Split(v, ",")
			if len(addrs) > 1 {
				entry.Logf("FerretDB listens on one address: %s (of --bind_ip %s)", addrs[0], v)
			}
			host = strings.TrimSpace(addrs[0])
			if host == "localhost" {
				host = "127.0.0.1"
			}
		case "--port":
			v, err := takeValue()
			if err != nil {
				return nil, nil, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				return nil, nil, fmt.Errorf("--port %q is not a TCP port", v)
			}
			port = n
		case "--dbpath":
			v, err := takeValue()
			if err != nil {
				return nil, nil, err
			}
			if v == "" {
				return nil, nil, fmt.Errorf("--dbpath is empty")
			}
			dbpath = strings.TrimSuffix(v, "/")
		case "--auth":
			auth = true
		case "--noauth":
			auth = false
		default:
			n, ok := ignored[flag]
			if !ok {
				return nil, nil, fmt.Errorf("mongod flag %q is not supported by this MongoDB stand-in (FerretDB); "+
					"supported: --bind_ip_all, --bind_ip, --port, --dbpath, --auth, --noauth, and storage tuning that is ignored", args[i])
			}
			if n == 1 {
				if _, err := takeValue(); err != nil {
					return nil, nil, err
				}
			}
			entry.Logf("ignoring %s (it tunes mongod's own storage engine)", flag)
		}
	}
	user, err := getenv("MONGO_INITDB_ROOT_USERNAME")
	if err != nil {
		return nil, nil, err
	}
	password, err := getenv("MONGO_INITDB_ROOT_PASSWORD")
	if err != nil {
		return nil, nil, err
	}
	if (user == "") != (password == "") {
		return nil, nil, fmt.Errorf("set both MONGO_INITDB_ROOT_USERNAME and MONGO_INITDB_ROOT_PASSWORD, or neither")
	}
	argv = []string{ferretdb,
		"--handler=sqlite",
		"--sqlite-url=file:" + dbpath + "/",
		"--state-dir=" + dbpath,
		"--listen-addr=" + net.JoinHostPort(host, strconv.Itoa(port)),
		"--telemetry=disable",
	}
	if user != "" {
		// As the official image: a root user means authentication.
		auth = true
		argv = append(argv, "--setup-database=admin")
		env = append(env, "FERRETDB_SETUP_USERNAME="+user, "FERRETDB_SETUP_PASSWORD="+password)
	}
	if auth {
		argv = append(argv, "--test-enable-new-auth")
	}
	return argv, env, nil
}
