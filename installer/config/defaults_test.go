package config

import (
	"reflect"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestSetDefaultsMinimal(t *testing.T) {
	in, _, err := decodeFile(t, "minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	SetDefaults(in)
	want := &Installation{
		APIVersion: APIVersion,
		Kind:       Kind,
		Metadata:   Metadata{Name: "onprem"},
		Spec: Spec{
			Version:      "2.9.0",
			Namespace:    "onprem",
			Domain:       "ci.example.com",
			Profile:      "small",
			Availability: "single",
			TLS:          TLS{Mode: "selfSigned"},
			Ingress:      Ingress{Mode: "install", ClassName: "onprem", ServiceType: "LoadBalancer"},
			Images:       Images{Platform: "quay.io/codefresh"},
			Modules:      Modules{Pipelines: Module{Enabled: ptr(true)}, GitOps: Module{Enabled: ptr(true)}},
			Legacy:       Legacy{NATS: Module{Enabled: ptr(false)}, Consul: Module{Enabled: ptr(false)}},
			Databases: Databases{
				MongoDB:    Database{Mode: "internal"},
				Redis:      Database{Mode: "internal"},
				RabbitMQ:   Database{Mode: "internal"},
				PostgreSQL: Database{Mode: "internal"},
			},
		},
	}
	if !reflect.DeepEqual(in, want) {
		t.Fatalf("defaulted:\n%+v\nwant:\n%+v", in, want)
	}
}

func TestSetDefaultsKeepsExplicitValues(t *testing.T) {
	in := &Installation{Spec: Spec{
		Namespace:    "ci",
		Profile:      "large",
		Availability: "high",
		Ingress:      Ingress{Mode: "existing", GatewayAPI: GatewayAPI{Enabled: true}},
		Storage:      Storage{ClassName: "fast"},
		Modules:      Modules{GitOps: Module{Enabled: ptr(false)}},
		Legacy:       Legacy{NATS: Module{Enabled: ptr(true)}},
		Databases: Databases{
			MongoDB: Database{Mode: "external", External: External{SecretName: "m"}},
			Redis:   Database{Persistence: Persistence{StorageClass: "own"}},
		},
		Placement: Placement{Tolerations: []Toleration{{Key: "a"}, {Operator: "Exists"}}},
		Runners:   []Runner{{Name: "a", Concurrency: 10}, {Name: "b", Namespace: "ci-b"}, {}},
	}}
	SetDefaults(in)
	s := in.Spec
	checks := []struct {
		name      string
		got, want any
	}{
		{"namespace", s.Namespace, "ci"},
		{"profile", s.Profile, "large"},
		{"availability", s.Availability, "high"},
		// With an existing IngressClass onprem installs no controller, so
		// neither its class nor its Service type is defaulted.
		{"className", s.Ingress.ClassName, ""},
		{"serviceType", s.Ingress.ServiceType, ""},
		{"gatewayNamespace", s.Ingress.GatewayAPI.GatewayNamespace, "ci"},
		{"gitops", s.Modules.GitOps.IsEnabled(true), false},
		{"pipelines", s.Modules.Pipelines.IsEnabled(false), true},
		{"nats", s.Legacy.NATS.IsEnabled(false), true},
		{"consul", s.Legacy.Consul.IsEnabled(true), false},
		{"mongodb", s.Databases.MongoDB, Database{Mode: "external", External: External{SecretName: "m"}}},
		{"redis storageClass", s.Databases.Redis.Persistence, Persistence{StorageClass: "own"}},
		{"rabbitmq storageClass", s.Databases.RabbitMQ.Persistence, Persistence{StorageClass: "fast"}},
		{"toleration operators", []string{s.Placement.Tolerations[0].Operator, s.Placement.Tolerations[1].Operator}, []string{"Equal", "Exists"}},
		{"runners", s.Runners, []Runner{
			{Name: "a", Namespace: "onprem-runner-a", Concurrency: 10},
			{Name: "b", Namespace: "ci-b", Concurrency: 4},
			{Concurrency: 4}, // no name, no namespace to derive
		}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

func TestSetDefaultsGatewayNamespaceOnlyWhenEnabled(t *testing.T) {
	in := &Installation{}
	SetDefaults(in)
	if in.Spec.Ingress.GatewayAPI != (GatewayAPI{}) {
		t.Fatalf("gatewayAPI defaulted while disabled: %+v", in.Spec.Ingress.GatewayAPI)
	}
}

func TestSetDefaultsRuntimes(t *testing.T) {
	for _, tc := range []struct {
		name          string
		runtimes      []Runtime
		configRuntime string
		wantNames     []string
		wantNS        []string
		wantConfig    string
	}{
		{"one unnamed", []Runtime{{}}, "", []string{"codefresh"}, []string{"codefresh"}, "codefresh"},
		{"unnamed second", []Runtime{{Name: "a"}, {}}, "", []string{"a", "codefresh"}, []string{"a", "codefresh"}, "a"},
		{"two unnamed", []Runtime{{}, {Name: "b", Namespace: "gitops"}, {}}, "", []string{"", "b", ""}, []string{"", "gitops", ""}, ""},
		{"explicit config runtime", []Runtime{{Name: "a"}, {Name: "b"}}, "b", []string{"a", "b"}, []string{"a", "b"}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &Installation{Spec: Spec{Runtimes: tc.runtimes, RuntimeConfig: RuntimeConfig{ConfigRuntime: tc.configRuntime}}}
			SetDefaults(in)
			var names, ns []string
			for _, rt := range in.Spec.Runtimes {
				names = append(names, rt.Name)
				ns = append(ns, rt.Namespace)
			}
			if !reflect.DeepEqual(names, tc.wantNames) || !reflect.DeepEqual(ns, tc.wantNS) {
				t.Errorf("names %q namespaces %q, want %q %q", names, ns, tc.wantNames, tc.wantNS)
			}
			if got := in.Spec.RuntimeConfig.ConfigRuntime; got != tc.wantConfig {
				t.Errorf("configRuntime = %q, want %q", got, tc.wantConfig)
			}
		})
	}
}

func TestSetDefaultsIsIdempotent(t *testing.T) {
	for _, name := range []string{"minimal.yaml", "full.yaml", "external-databases.yaml"} {
		in, _, err := decodeFile(t, name)
		if err != nil {
			t.Fatal(err)
		}
		SetDefaults(in)
		once, err := in.Digest()
		if err != nil {
			t.Fatal(err)
		}
		again := clone(t, in)
		SetDefaults(again)
		if !reflect.DeepEqual(in, again) {
			t.Errorf("%s: second SetDefaults changed the installation", name)
		}
		if twice, _ := again.Digest(); twice != once {
			t.Errorf("%s: digest changed", name)
		}
	}
	SetDefaults(nil) // must not panic
}

func TestHelpers(t *testing.T) {
	if !(Module{}).IsEnabled(true) || (Module{}).IsEnabled(false) || (Module{Enabled: ptr(false)}).IsEnabled(true) {
		t.Error("Module.IsEnabled")
	}
	if !(ComponentOverride{}).IsEnabled() || (ComponentOverride{Enabled: ptr(false)}).IsEnabled() {
		t.Error("ComponentOverride.IsEnabled")
	}
	if !(ClusterRef{}).IsPlatformCluster() || (ClusterRef{Context: "x"}).IsPlatformCluster() {
		t.Error("ClusterRef.IsPlatformCluster")
	}
	var d Databases
	for _, db := range d.All() {
		db.Mode = "external"
	}
	if !d.MongoDB.IsExternal() || !d.PostgreSQL.IsExternal() {
		t.Error("Databases.All must point into the struct")
	}
}
