package catalog

import "time"

// TimeText writes a run's time, or a point in time, for a message: in
// UTC, RFC 3339 with every decimal of the second the time has (none for
// a whole second). Two times a fraction of a second apart never read the
// same, as they did when "no run finished before 17:42:37" was followed
// by "the oldest finished at 17:42:37". Run ids keep their own form.
func TimeText(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
