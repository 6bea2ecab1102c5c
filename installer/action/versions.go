package action

import (
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/version"
)

// VersionInfo describes one known platform release.
type VersionInfo struct {
	Version     string   `json:"version"`
	Date        string   `json:"date,omitempty"`
	Kubernetes  string   `json:"kubernetes"`
	UpgradeFrom string   `json:"upgradeFrom,omitempty"`
	Required    bool     `json:"required,omitempty"`
	Installable bool     `json:"installable"`
	Reason      string   `json:"reason,omitempty"`
	Components  []string `json:"components"`
	Migrations  []string `json:"migrations,omitempty"`
	Notes       string   `json:"notes,omitempty"`
}

// Versions lists the platform releases this onprem knows.
type Versions struct {
	// Releases to list (default: the embedded ones).
	Releases *release.Set
}

// Run lists them, oldest first.
func (v *Versions) Run() ([]VersionInfo, error) {
	set := v.Releases
	if set == nil {
		var err error
		if set, err = release.Embedded(); err != nil {
			return nil, err
		}
	}
	var out []VersionInfo
	for _, r := range set.All() {
		out = append(out, versionInfo(r))
	}
	return out, nil
}

func versionInfo(r *release.Release) VersionInfo {
	info := VersionInfo{
		Version: r.Version, Date: r.Date, Kubernetes: r.Kubernetes, UpgradeFrom: r.UpgradeFrom,
		Required: r.Required, Installable: true, Components: r.ComponentNames(), Notes: r.Notes,
	}
	if err := r.CheckInstaller(version.Version); err != nil {
		info.Installable, info.Reason = false, err.Error()
	}
	for _, m := range r.Migrations {
		info.Migrations = append(info.Migrations, m.Name)
	}
	return info
}
