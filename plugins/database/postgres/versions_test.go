package postgres

import (
	"strconv"
	"strings"
	"testing"
)

// Table by table, pipe lists the tables itself: a server whose catalogs
// it does not know is refused, naming the versions it knows.
func TestTablesVersion(t *testing.T) {
	for num, ok := range map[int]bool{120022: false, 130023: true, 140019: true, 180006: true, 190000: false} {
		err := tablesVersion(num, strconv.Itoa(num/10000)+".x", 4)
		if ok != (err == nil) || (err != nil && (!strings.Contains(err.Error(), "PostgreSQL 13 to 18") || !strings.Contains(err.Error(), "jobs = 1"))) {
			t.Errorf("server_version_num %d: %v", num, err)
		}
	}
}
