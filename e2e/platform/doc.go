// Package platform holds the kind ring's end-to-end test of the whole
// platform (TestPlatform): real kubelets, real containers, real databases,
// no registry but the one the test runs.
//
// The test drives the onprem binary exactly as an operator would, on a
// kind cluster from e2e/kindcluster, with the images of e2e/images:
//
//  1. builds the onprem binary and the images (cached in $ONPREM_CACHE);
//  2. creates a kind cluster with a unique name, whose CNI is kube-router
//     (NetworkPolicies enforced: every flow of the platform below works
//     only if its policies allow it), and starts a registry (CNCF
//     distribution) on this machine's address on kind's network;
//  3. `onprem bundle keygen`, `onprem bundle create` for each version it
//     uses, from an OCI layout of the locally built images, signed by
//     default, and `onprem bundle push` to that registry (verifying the
//     signature); every configuration trusts the key in spec.trust;
//  4. `onprem preflight`, then `onprem install --bundle` of the oldest
//     version; every component Ready and no component drifted from its
//     release (`onprem status`, as after every later operation); `onprem
//     doctor` finds no error and no warning (drift_test.go);
//  5. HTTPS through the ingress controller (the node's NodePort) to
//     pipelines-api and gitops-api, each reporting its dependencies
//     healthy; records written to MongoDB (through those services) and to
//     PostgreSQL (audit-manager, through the API server's service proxy);
//     the NetworkPolicies step (netpol_test.go): a pod without the
//     platform's labels in its namespace reaches the cluster's DNS and
//     nothing else (MongoDB, PostgreSQL, Redis, RabbitMQ, a routed service,
//     the ingress controller, an address outside the cluster: refused); a
//     pod of another namespace reaches the ingress controller but not the
//     databases nor the routed service; pipelines-api reaches its MongoDB,
//     Redis and RabbitMQ but not PostgreSQL (which it does not use) nor
//     the outside address (and, in the backup step, not the bucket that the
//     backup's pods do reach); gitops-ui's image changed by hand,
//     which status names as drift, then `onprem install` with the unchanged
//     configuration while clients read through pipelines-api and
//     gitops-api: it repairs gitops-ui alone, names it ("repaired:
//     Deployment/gitops-ui image"), and no request fails (drift_test.go);
//  6. `onprem upgrade apply` across two steps, one command each, while a
//     client reads records through the ingress controller at 10 requests
//     a second (traffic_test.go): the first (a required stop with a
//     migration and its backup, new database images) restarts the
//     databases, and its interruption window is measured; the second
//     changes only the services, and no request may fail; then a re-run
//     of `onprem install` whose configuration rolls every service, with
//     no request failing either; the records are still there and the
//     versions changed;
//  7. an upgrade whose migration Job exits 1, and one whose image never
//     becomes ready: each rolls back by itself, the command fails saying
//     why, and the records are still there; while the second waits for its
//     image, `onprem doctor` names the image and the component;
//  8. every secret onprem generated rotated one after the other under one
//     set of clients that run the whole time (records written and read
//     through the ingress controller, tokens signed and checked by
//     pipelines-api, audit-manager read through the service proxy):
//     `onprem rotate certificates` (a renewal under the same CA), `--ca`
//     (the clients then take the new bundle), `rotate credentials --all`
//     (every login and both admins), `rotate keys`, `--retire-ca`; no
//     request fails, the controller serves each new certificate (the time
//     it took is logged); then every record written before and during is
//     read back, each old password is refused in its database's pod, a
//     client holding only the old CA is refused, and after `rotate keys
//     --retire` the token and the value of the old keys are refused, a new
//     token accepted (rotate_test.go, rotatetraffic_test.go); `onprem
//     console` started, logged into with the URL it prints, its overview
//     and pipelines-api's page (with real log lines) checked, and stopped
//     with an interrupt (console_test.go);
//     `onprem runner install` (the runner stand-in image as agent and
//     engine) and the runner `runner list` shows ready;
//     `onprem runtime install` of the real GitOps runtime chart (the
//     published package from ../shared/upstream, served by a loopback OCI
//     registry as a mirror, carried by the bundle) with the stand-in image
//     e2e/images/cmd/gitops-standin under every image it renders, against
//     a real Git server, and `runtime list`; read back from the installed
//     objects (runtime_test.go): every pod running or completed under the
//     restricted Pod Security Standard, every image from the ring's
//     registry, the pre-install hooks done (the Secret one of them makes,
//     which Redis and Argo CD read), the crds/ folders' CRDs served, and
//     the upstream contract (name, platform URL and account, token and CA
//     Secret references, its Ingress under the platform's domain);
//  9. a support bundle of the whole platform holds no value of any Secret
//     of the cluster, and `support-bundle analyze` reads it offline;
//     disaster recovery (recovery_test.go), after which status shows the
//     backup restored from as a successful backup and the restore as the
//     last operation;
//  10. on that second cluster (a control plane and three workers),
//     `onprem uninstall` leaves the PersistentVolumeClaims;
//  11. writes the timing figures (per component apply-to-Ready, total
//     install time, the true critical path and the ratio between them,
//     requests sent and failed during each upgrade and the re-run) to a
//     file it prints.
//
// TestHighAvailability (ha_test.go, `make e2e-ha`, not in CI's run: see
// docs/testing.md) builds the same way, then, on a cluster of its own (a
// control plane and three workers, a lost node NotReady after 16 s):
// 2.8.0 installed with one server per database (MongoDB external: a
// FerretDB on this machine, since the ring has no MongoDB with replica
// sets), records written to PostgreSQL and MongoDB and a key to Redis;
// then `availability: high` set and `onprem install` run: `onprem diff`
// names the three moves first, install moves PostgreSQL, RabbitMQ and
// Redis to their replicated forms, and every record and the key are read
// back; every database member on a node of its own; the members' peer
// ports (Patroni's REST API, the Sentinels, Erlang's distribution and
// epmd) refused to an unlabelled pod and to the services, their client
// ports open only to their clients; `onprem rotate credentials --all`
// under traffic (no request fails, each old password refused and each
// new one accepted on every member); then the node of the PostgreSQL
// primary, after it is back that of the Redis master, then that of the
// leader of pipelines-api's quorum queue (started again only once the
// other RabbitMQ members saw it stopped), killed (docker kill) while
// records are written and services asked for their databases through
// the ingress controller and records written to PostgreSQL through
// audit-manager: another member leads, the platform serves again (the
// time and each cause's last failure are logged and written to the timing
// file), every write acknowledged before and during the loss is read
// back, `onprem doctor` names the database that runs a member short, and
// the node's pods are all ready again once it starts; then the bundle of
// a patch release of 2.8.0 that no onprem embeds (every platform image
// new, the databases' replicated ones among them), made with the library
// behind `bundle create`, signed and pushed, and `onprem upgrade apply`
// to it while every worker is cordoned, drained as kubectl drain does
// and uncordoned in turn (haupgrade_test.go), under the same traffic:
// the upgrade succeeds, every member runs the new image, no acknowledged
// write or confirmed message is lost, the changes of primary and master
// are bounded, and no request to the services fails (the endpoints'
// changes are logged beside a failure); last, a support bundle of the
// replicated platform holds no secret value. Its figures go to
// $ONPREM_CACHE/e2e/high-availability-timing.txt.
//
// A failed step leaves a support bundle of the cluster in
// $ONPREM_CACHE/e2e/support-bundles. The cluster is deleted at the end,
// also when the test fails, unless
// ONPREM_E2E_KEEP=1. ONPREM_SKIP_KIND=1 skips the test (CI never sets it).
// Run them with `make e2e` and `make e2e-ha`.
package platform
