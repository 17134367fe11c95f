// Package objlock is what the object stores' sinks share to lock the
// objects they write, so that nobody can delete or change them for a
// while (S3 Object Lock, GCS object retention, Azure Blob immutability
// policies): the attributes, their checks, until when an object is locked,
// and which objects pipe leaves unlocked.
package objlock

import (
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Attributes are the sink attributes that lock objects; needs says what
// the store must be set up with.
func Attributes(feature, needs string) []sdk.Attribute {
	return []sdk.Attribute{
		{Name: "object_lock_days", Type: sdk.Number, Default: int64(0), Description: fmt.Sprintf("Lock every object this many days from its upload (%s, set in the request that writes it; %s): nobody can delete or change it before then. 0: no lock. Take it longer than the runs are kept (keep_within, keep_last × the interval) so that retention finds them unlocked.", feature, needs)},
		{Name: "object_lock_mode", Type: sdk.String, Default: "compliance", Description: `With object_lock_days: "compliance", which nobody can shorten or lift, the store's owner included; or "governance", which users with the right to (on S3, s3:BypassGovernanceRetention) can lift.`},
	}
}

// Config is what Attributes decode to.
type Config struct {
	Days int    `pipe:"object_lock_days"`
	Mode string `pipe:"object_lock_mode"`
}

// Default is the configuration before decoding: no lock, compliance.
func Default() Config { return Config{Mode: "compliance"} }

// Check validates c.
func (c Config) Check() sdk.Diagnostics {
	var d sdk.Diagnostics
	if c.Days < 0 || c.Days > 36500 {
		d = append(d, sdk.AttrError("object_lock_days", "invalid object lock", fmt.Sprintf("%d days: use between 1 and 36500, or 0 for no lock", c.Days))...)
	}
	switch strings.ToLower(c.Mode) {
	case "compliance", "governance":
	default:
		d = append(d, sdk.AttrError("object_lock_mode", "unknown object lock mode", fmt.Sprintf("%q: use \"compliance\" or \"governance\"", c.Mode))...)
	}
	return d
}

// On reports whether objects are locked.
func (c Config) On() bool { return c.Days > 0 }

// Compliance reports whether the lock is one nobody can lift.
func (c Config) Compliance() bool { return !strings.EqualFold(c.Mode, "governance") }

// Until is when an object written at now is unlocked.
func (c Config) Until(now time.Time) time.Time {
	return now.Add(time.Duration(c.Days) * 24 * time.Hour).UTC()
}

// Locks reports whether the object at key is locked when written: every
// one pipe writes, except the store's index (sdk.IndexName), which pipe
// rewrites, and a run's pin (<manifest>.pin), which pipe backups unpin
// removes.
func (c Config) Locks(key string) bool {
	return c.On() && path.Base(key) != sdk.IndexName && !strings.HasSuffix(key, PinExt)
}

// PinExt ends the key of a run's pin.
const PinExt = ".pin"
