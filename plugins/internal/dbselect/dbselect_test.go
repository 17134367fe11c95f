package dbselect

import (
	"strings"
	"testing"
)

func TestMatchAndCheck(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{{"*", "odd name/ü", true}, {"app_*", "app_1", true}, {"app_*", "shop", false}, {"a?c", "a/c", true}, {"[ab]*", "crm", false}} {
		if got := Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v", tc.pattern, tc.name, got)
		}
	}
	if err := Check([]string{"*", "shop"}); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]string{{""}, {"[a"}} {
		if err := Check(bad); err == nil {
			t.Errorf("Check(%q) passed", bad)
		}
	}
}

func TestChoose(t *testing.T) {
	all := []string{"shop", "mysql", "app_a", "sys"}
	system := func(n string) bool { return n == "mysql" || n == "sys" }
	got, err := Choose(all, []string{"*"}, nil, system)
	if err != nil || strings.Join(got, ",") != "shop,app_a" {
		t.Errorf("* = %v, %v", got, err)
	}
	got, err = Choose(all, []string{"*", "mysql"}, []string{"app_*"}, system)
	if err != nil || strings.Join(got, ",") != "shop,mysql" {
		t.Errorf("* and mysql less app_* = %v, %v", got, err)
	}
	if _, err := Choose(all, []string{"nope"}, nil, system); err == nil || !strings.Contains(err.Error(), `"nope" is not a database`) {
		t.Errorf("a missing name: %v", err)
	}
	if _, err := Choose(all, []string{"zz*"}, nil, system); err == nil || !strings.Contains(err.Error(), "names none") {
		t.Errorf("nothing picked: %v", err)
	}
}
