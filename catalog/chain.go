package catalog

import (
	"fmt"
	"strings"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// maxChain bounds a chain's length: a loop of parents (a store edited by
// hand) ends there instead of running for ever.
const maxChain = 10000

// Parent returns the run id r builds on (its FactParent), or "".
func (r *Run) Parent() string { return r.Manifest.Source[sdk.FactParent] }

// Chain returns the runs a restore of r needs, r first, then its parent,
// and so on to the full run the chain starts from. It fails naming the
// first run of the chain the store lacks, or one that is partial or
// damaged: the runs after it cannot be restored.
func (c *Catalog) Chain(r *Run) ([]*Run, error) {
	chain := []*Run{r}
	seen := map[string]bool{r.Manifest.RunID: true}
	for cur := r; cur.Parent() != ""; {
		id := cur.Parent()
		p := c.Run(id)
		switch {
		case p == nil:
			return chain, &BrokenChain{Run: r.Manifest.RunID, Missing: id, Child: cur.Manifest.RunID, Why: "is not in the store"}
		case seen[id] || len(chain) >= maxChain:
			return chain, &BrokenChain{Run: r.Manifest.RunID, Missing: id, Child: cur.Manifest.RunID, Why: "closes a loop of parents"}
		case p.Manifest.Partial():
			return chain, &BrokenChain{Run: r.Manifest.RunID, Missing: id, Child: cur.Manifest.RunID, Why: "is partial"}
		case p.Manifest.Damaged():
			return chain, &BrokenChain{Run: r.Manifest.RunID, Missing: id, Child: cur.Manifest.RunID, Why: "is damaged"}
		}
		seen[id] = true
		chain = append(chain, p)
		cur = p
	}
	return chain, nil
}

// BrokenChain is a chain of runs that lacks one: Missing, the parent of
// Child, on the way from Run to its full.
type BrokenChain struct {
	Run, Missing, Child, Why string
}

func (e *BrokenChain) Error() string {
	if e.Child == e.Run {
		return fmt.Sprintf("run %s builds on run %s, which %s: it cannot be restored (a run that builds on others needs every one of them back to its full)", e.Run, e.Missing, e.Why)
	}
	return fmt.Sprintf("run %s needs run %s (the parent of run %s), which %s: it cannot be restored (a run that builds on others needs every one of them back to its full)", e.Run, e.Missing, e.Child, e.Why)
}

// Dependents returns the complete runs that build on the run with id,
// directly or through others, newest first.
func (c *Catalog) Dependents(id string) []*Run {
	needs := map[string]bool{id: true}
	var out []*Run
	// Runs are newest first and a child finishes after its parent: from
	// the oldest up, each run's parent is settled before the run.
	for i := len(c.Runs) - 1; i >= 0; i-- {
		r := c.Runs[i]
		if p := r.Parent(); p != "" && needs[p] && !needs[r.Manifest.RunID] {
			needs[r.Manifest.RunID] = true
			out = append([]*Run{r}, out...)
		}
	}
	return out
}

// IDs are the runs' ids, in order.
func IDs(runs []*Run) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.Manifest.RunID
	}
	return ids
}

// RunIDs names runs in a message: "a, b and c".
func RunIDs(runs []*Run) string {
	ids := IDs(runs)
	if len(ids) <= 1 {
		return strings.Join(ids, "")
	}
	return strings.Join(ids[:len(ids)-1], ", ") + " and " + ids[len(ids)-1]
}
