package main

import (
	"strings"
	"testing"
)

// A partial run's summary names each database once: a database read
// table by table with the count of its streams that failed.
func TestGroups(t *testing.T) {
	got := groups([]string{"secret.dump", "big/data/public/items.copy", "big/post-data.dump", "crm/pre-data.dump", "globals.sql"})
	if s := strings.Join(got, ", "); s != "secret.dump, big (2 streams), crm/pre-data.dump, globals.sql" {
		t.Errorf("groups: %s", s)
	}
}
