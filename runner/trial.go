package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// A trial run (Options.Trial, pipe bench) moves every byte as a real run
// does and then takes back what it wrote: it writes no manifest, applies
// no retention, and removes every object it committed before it reports
// success. It must not disturb real backups, so it writes only to storage
// sinks (which can tell whether a key holds an object and remove one),
// never to a key that already holds an object, and it never restores.

// checkTrialSinks refuses sinks that cannot take back what they receive.
func checkTrialSinks(sinks []*endpoint) error {
	for _, s := range sinks {
		if _, ok := s.sink.(sdk.Storage); !ok {
			return fmt.Errorf("sink %s: a trial run takes back everything it writes, and a %s sink cannot (it is not storage that lists and removes objects): benchmark this pipeline with a storage sink (fs, s3, gcs, azure) in its place", s.name, s.def.Type)
		}
	}
	return nil
}

// checkTrialKeys refuses a trial whose objects would replace objects that
// exist: taking them back would delete a real backup.
func checkTrialKeys(ctx context.Context, sinks []*endpoint, job *engine.Job) error {
	for i, s := range sinks {
		st := s.sink.(sdk.Storage)
		for _, stream := range job.Streams {
			key := stream.Objects[i].Key
			rc, err := st.Open(ctx, key)
			switch {
			case err == nil:
				rc.Close()
				return fmt.Errorf("sink %s: %s already exists, and a trial run would replace it and then remove it: put ${run.id} in the sink's path, or point the sink elsewhere for the benchmark", s.name, key)
			case !errors.Is(err, sdk.ErrNotFound):
				return fmt.Errorf("sink %s: checking that %s is free before a trial run: %w", s.name, key, err)
			}
		}
	}
	return nil
}

// takeBackTrial removes every object of a finished trial run. It is the
// run's Finish: when it fails, the engine's own take-back tries again and
// the run fails with what could not be removed.
func takeBackTrial(ctx context.Context, sinks []*endpoint, res *engine.Result) error {
	var errs []error
	for _, r := range res.Streams {
		for i, o := range r.Objects {
			if err := sinks[i].sink.(sdk.Remover).Remove(ctx, o.Key); err != nil {
				errs = append(errs, fmt.Errorf("sink %s: removing the trial's object %s: %w", sinks[i].name, o.Key, err))
			}
		}
	}
	return errors.Join(errs...)
}
