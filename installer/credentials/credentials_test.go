package credentials

import (
	"strings"
	"testing"
)

func TestPlanGivesEveryServiceItsOwnUser(t *testing.T) {
	plan := Plan(Needs{
		Internal:        map[string]bool{"mongodb": true, "postgresql": true, "redis": true, "rabbitmq": true},
		MongoDBUsers:    []string{"pipelines-api", "gitops-api"},
		PostgreSQLUsers: []string{"audit-manager"},
		PlatformKeys:    true,
		SelfSignedTLS:   true,
	})
	var names []string
	users := map[string]bool{}
	for _, s := range plan {
		names = append(names, s.Name)
		for _, k := range s.Keys {
			if k.Kind != Fixed && k.Value != "" {
				t.Errorf("%s/%s: a generated key carries a value", s.Name, k.Name)
			}
			if k.Name == "username" && (s.Name == ServiceSecret("pipelines-api", "mongodb") || s.Name == ServiceSecret("gitops-api", "mongodb")) {
				users[k.Value] = true
			}
		}
	}
	want := "onprem-audit-manager-postgresql onprem-gitops-api-mongodb onprem-mongodb-admin onprem-pipelines-api-mongodb onprem-platform-keys onprem-postgresql-admin onprem-rabbitmq onprem-redis onprem-tls"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("plan = %s\nwant  %s", got, want)
	}
	if !users["pipelines_api"] || !users["gitops_api"] {
		t.Errorf("service users = %v", users)
	}
}

func TestPlanLeavesExternalServicesAlone(t *testing.T) {
	plan := Plan(Needs{Internal: map[string]bool{"redis": true}, MongoDBUsers: []string{"a"}})
	for _, s := range plan {
		if s.Name == MongoDBAdmin || s.Name == PostgreSQLAdmin || s.Name == RabbitMQ || s.Name == TLS {
			t.Errorf("external/absent service got a generated secret %s", s.Name)
		}
	}
	if len(plan) != 2 {
		t.Errorf("plan = %+v", plan)
	}
}

func TestDatabaseName(t *testing.T) {
	if got := DatabaseName("analytics-reporter"); got != "analytics_reporter" {
		t.Errorf("DatabaseName = %s", got)
	}
}
