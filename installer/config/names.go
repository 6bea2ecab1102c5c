package config

import (
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"

	"onprem.dev/onprem/installer/quote"
)

// Each check returns "" for a valid value, else a message saying what is
// wrong and what would be valid, plus (sometimes) a hint.

// tooLong says a value is far longer than what is checked can be (max
// characters), without looking at it further: the checks below run
// regular expressions, and a value of megabytes must not cost seconds.
func tooLong(v string, max int, what string) string {
	if len(v) <= max {
		return ""
	}
	return sprintf("%q is not a valid %s: it is %d bytes long, and a %s is at most %d characters", v, what, len(v), what, max)
}

func checkDNSLabel(v string) string {
	if msg := tooLong(v, validation.DNS1123LabelMaxLength, "DNS label"); msg != "" {
		return msg
	}
	if msgs := validation.IsDNS1123Label(v); len(msgs) > 0 {
		return sprintf("%q is not a valid DNS label: %s", v, strings.Join(msgs, "; "))
	}
	return ""
}

// SystemNamespaces are the namespaces of Kubernetes itself. Kubernetes
// also reserves every name starting with "kube-" for itself.
var SystemNamespaces = []string{"default", "kube-node-lease", "kube-public", "kube-system"}

// IsSystemNamespace says whether ns belongs to Kubernetes itself.
func IsSystemNamespace(ns string) bool {
	return slices.Contains(SystemNamespaces, ns) || strings.HasPrefix(ns, "kube-")
}

// checkNamespace checks a namespace that onprem installs into and
// manages (labels for Pod Security, default-deny NetworkPolicies, removes
// with --purge): a DNS label that is not one of Kubernetes' own. what names
// its owner ("the platform"), example a good name.
func checkNamespace(v, what, example string) string {
	if msg := checkDNSLabel(v); msg != "" {
		return msg
	}
	if IsSystemNamespace(v) {
		return sprintf("%q is a namespace of Kubernetes itself (%s, and every name starting with kube-): onprem labels %s's namespace for the restricted Pod Security Standard and puts default-deny NetworkPolicies in it, which would break what already runs there; give %s a namespace of its own, e.g. %s",
			v, strings.Join(SystemNamespaces, ", "), what, what, example)
	}
	return ""
}

func checkDNSSubdomain(v string) string {
	if msg := tooLong(v, validation.DNS1123SubdomainMaxLength, "DNS subdomain"); msg != "" {
		return msg
	}
	if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
		return sprintf("%q is not a valid DNS subdomain: %s", v, strings.Join(msgs, "; "))
	}
	return ""
}

// checkDomain checks the platform's domain: a lowercase DNS name with no
// scheme, port or path. The hint is the value cleaned up, when that is valid.
func checkDomain(v string) (msg, hint string) {
	// Room for a scheme, port and path pasted around the longest name.
	if msg := tooLong(v, 4*validation.DNS1123SubdomainMaxLength, "DNS name"); msg != "" {
		return msg, ""
	}
	if len(validation.IsDNS1123Subdomain(v)) == 0 {
		return "", ""
	}
	var problem string
	switch {
	case strings.Contains(v, "://"):
		problem = "must not include a scheme"
	case strings.Contains(v, "/"):
		problem = "must not include a path"
	case strings.Contains(v, ":"):
		problem = "must not include a port"
	case strings.ToLower(v) != v:
		problem = "must be lowercase"
	case strings.Contains(v, "*"):
		problem = "must not be a wildcard"
	default:
		problem = "is not a valid DNS name: " + strings.Join(validation.IsDNS1123Subdomain(v), "; ")
	}
	msg = sprintf("%q %s (valid: a lowercase DNS name such as ci.example.com)", v, problem)
	if fixed := cleanDomain(v); fixed != v && len(validation.IsDNS1123Subdomain(fixed)) == 0 {
		hint = "did you mean " + quote.Value(fixed) + "?"
	}
	return msg, hint
}

// cleanDomain strips what operators commonly paste along with a domain.
func cleanDomain(v string) string {
	if _, rest, ok := strings.Cut(v, "://"); ok {
		v = rest
	}
	v, _, _ = strings.Cut(v, "/")
	if h, _, err := net.SplitHostPort(v); err == nil {
		v = h
	}
	return strings.TrimSuffix(strings.ToLower(v), ".")
}

// checkHostPort checks a registry host: host or host:port, where host is a
// lowercase DNS name or an IP address ([...] for IPv6 with a port).
func checkHostPort(v string) (msg, hint string) {
	const valid = "(valid: host or host:port, e.g. registry.internal:5000)"
	if strings.Contains(v, "://") {
		return sprintf("%q must not include a scheme %s", v, valid), "did you mean " + quote.Value(cleanHost(v)) + "?"
	}
	if strings.Contains(v, "/") {
		host, path, _ := strings.Cut(v, "/")
		return sprintf("%q must not include a path %s", v, valid), "set host: " + quote.Text(host) + " and pathPrefix: " + quote.Text(path)
	}
	host, port, hasPort := v, "", false
	if strings.Contains(v, ":") && net.ParseIP(v) == nil {
		h, p, err := net.SplitHostPort(v)
		if err != nil {
			return sprintf("%q is not a valid host:port %s", v, valid), ""
		}
		host, port, hasPort = h, p, true
	}
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || len(validation.IsValidPortNum(n)) > 0 {
			return sprintf("%q has an invalid port %q (valid: 1 to 65535)", v, port), ""
		}
	}
	if net.ParseIP(host) != nil {
		return "", ""
	}
	if msgs := validation.IsDNS1123Subdomain(host); len(msgs) > 0 {
		return sprintf("%q is not a valid registry host %s: %s", v, valid, strings.Join(msgs, "; ")), ""
	}
	return "", ""
}

func cleanHost(v string) string {
	if _, rest, ok := strings.Cut(v, "://"); ok {
		v = rest
	}
	v, _, _ = strings.Cut(v, "/")
	return v
}

// pathComponent is one component of an image repository path, as the OCI
// distribution reference grammar defines it.
var pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*$`)

// checkRepoPath checks a repository path such as team/onprem.
func checkRepoPath(v string) string {
	for c := range strings.SplitSeq(v, "/") {
		if !pathComponent.MatchString(c) {
			return sprintf("%q is not a valid repository path: component %q must be lowercase letters and digits, separated by '.', '_', '__' or '-' (e.g. onprem or team/onprem), with no leading, trailing or double '/'", v, c)
		}
	}
	return ""
}

// checkImagePrefix checks a registry and path under which image names are
// appended, e.g. quay.io/codefresh or registry.internal:5000/ci.
func checkImagePrefix(v string) (msg, hint string) {
	const valid = "(valid: registry host and optional path, e.g. quay.io/codefresh, with no tag or digest)"
	if strings.Contains(v, "://") {
		return sprintf("%q must not include a scheme %s", v, valid), "did you mean " + quote.Value(strings.SplitN(v, "://", 2)[1]) + "?"
	}
	if strings.Contains(v, "@") {
		return sprintf("%q must not include a digest %s", v, valid), ""
	}
	host, path, hasPath := strings.Cut(v, "/")
	if !strings.ContainsAny(host, ".:") && host != "localhost" {
		return sprintf("%q does not start with a registry host %s", v, valid), "did you mean " + quote.Value("docker.io/"+v) + "?"
	}
	if m, _ := checkHostPort(host); m != "" {
		return sprintf("%q has an invalid registry host %q %s", v, host, valid), ""
	}
	if hasPath {
		if strings.Contains(path, ":") {
			return sprintf("%q must not include a tag %s", v, valid), ""
		}
		if m := checkRepoPath(path); m != "" {
			return sprintf("%q has an invalid path: %s", v, m), ""
		}
	}
	return "", ""
}

func checkLabelKey(v string) string {
	if msgs := content.IsLabelKey(v); len(msgs) > 0 {
		return sprintf("%q is not a valid label key: %s", v, strings.Join(msgs, "; "))
	}
	return ""
}

func checkLabelValue(v string) string {
	if msgs := content.IsLabelValue(v); len(msgs) > 0 {
		return sprintf("%q is not a valid label value: %s", v, strings.Join(msgs, "; "))
	}
	return ""
}

// checkQuantity checks a volume size: a positive Kubernetes quantity.
func checkQuantity(v string) (msg, hint string) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		up := strings.ToUpper(v)
		for _, unit := range []string{"KB", "MB", "GB", "TB"} {
			if n, ok := strings.CutSuffix(up, unit); ok {
				if _, err := resource.ParseQuantity(n + unit[:1] + "i"); err == nil {
					hint = "did you mean " + quote.Value(n+unit[:1]+"i") + "?"
				}
			}
		}
		return sprintf("%q is not a valid Kubernetes quantity (valid: a number with a unit such as 20Gi, 500Mi or 1Ti)", v), hint
	}
	if q.Sign() <= 0 {
		return sprintf("%q must be greater than zero (e.g. 20Gi)", v), ""
	}
	return "", ""
}

// checkHTTPURL checks a URL whose scheme must be http or https; scheme is
// the one suggested when the value has none.
func checkHTTPURL(v, scheme, example string) (msg, hint string) {
	valid := "(valid: an http:// or https:// URL, e.g. " + example + ")"
	if !strings.Contains(v, "://") {
		if at, colon := strings.Index(v, "@"), strings.LastIndex(v, ":"); at > 0 && colon > at {
			return sprintf("%q is an SSH address, not an http(s) URL %s", v, valid), "use the repository's https clone URL"
		}
		return sprintf("%q has no scheme %s", v, valid), "did you mean " + quote.Value(scheme+"://"+v) + "?"
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return sprintf("%q is not a valid URL %s", v, valid), ""
	case u.Scheme != "http" && u.Scheme != "https":
		return sprintf("%q has scheme %q %s", v, u.Scheme, valid), ""
	case u.Host == "":
		return sprintf("%q has no host %s", v, valid), ""
	}
	return "", ""
}

// checkEnvName checks the name of an environment variable.
func checkEnvName(v string) string {
	if msgs := content.IsCIdentifier(v); len(msgs) > 0 {
		return sprintf("%q is not a valid environment variable name (valid: letters, digits and '_', not starting with a digit, e.g. GIT_TOKEN)", v)
	}
	return ""
}
