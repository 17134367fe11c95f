package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// A cluster restore of a partial run takes a name of a database that
// failed in the backup (the host then names it and fails the run), and
// answers which failed streams it was asked for; a name that is in
// neither is still refused, with the failed ones listed.
func TestClusterPreparePartial(t *testing.T) {
	sink := func(include ...string) *Sink {
		return &Sink{c: sinkConfig{Jobs: 2}, cluster: &clusterSink{include: include}}
	}
	objs := []sdk.Object{{Stream: streamGlobals}, {Stream: "shop.dump"}, {Stream: "crm.dump"}}
	failed := []string{"billing.dump", "big/data/public/items.copy", streamGlobals}
	for _, tc := range []struct {
		include []string
		wanted  string
		err     string
	}{
		{[]string{"*"}, "[true true true]", ""},
		{[]string{"shop"}, "[false false true]", ""},
		{[]string{"shop", "billing"}, "[true false true]", ""},
		{[]string{"big"}, "[false true true]", ""}, // only what the backup lacks: the run fails
		{[]string{"nosuch"}, "", `"nosuch" is not in the run (it holds: shop, crm; failed in the backup: billing, big)`},
	} {
		wanted, err := sink(tc.include...).PreparePartial(context.Background(), objs, failed)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: err = %v, want %q", tc.include, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.include, err)
		case tc.err == "" && fmt.Sprint(wanted) != tc.wanted:
			t.Errorf("%v: wanted %v, want %s", tc.include, wanted, tc.wanted)
		}
	}
}
