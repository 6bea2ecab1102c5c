package doctor

import (
	"fmt"

	"onprem.dev/onprem/installer/backup"
)

var backupSchedule = Analyzer{
	ID:          "backup-schedule",
	Description: "the scheduled backup is suspended by a restore or an availability move that did not finish",
	Run: func(in *Input) []Finding {
		if lockLive(in) {
			return nil // the operation that suspended it is running: stale-lock says which
		}
		ns := in.S.Meta.Namespace
		var out []Finding
		for _, cj := range in.S.Objects(ns).CronJobs {
			was, ok := cj.Annotations[backup.SuspendAnnotation]
			if !ok {
				continue
			}
			out = append(out, Finding{Severity: Warning, Object: object("CronJob", ns, cj.Name),
				Title: "the scheduled backup is suspended: no backup is made on schedule",
				Evidence: []string{fmt.Sprintf("suspended by onprem while a restore or an availability move replaced the databases (annotation %s: %s, its value before)",
					backup.SuspendAnnotation, was)},
				Remediation: "finish that operation (last-operation names it): the same 'onprem restore' again, or 'onprem install' for a move; both resume the schedule once the data is back"})
		}
		return out
	},
}
