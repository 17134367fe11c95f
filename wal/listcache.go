package wal

import (
	"context"
	"path"
	"sync"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/wal/walname"
)

// listCache is what a prefetch (find) or a process's pushes
// (findForPush) learnt of the archive's objects, sixteen segments at a
// time: the segments whose names differ only in their last digit are one
// List, where looking each up is sixteen, each a request the store serves
// and may charge for (pgBackRest's archive-get keeps such a list too).
type listCache struct {
	mu     sync.Mutex
	groups map[string]*listGroup // by folder + the names' shared prefix
	order  []string              // the groups, oldest first
}

// listGroup is what a listCache knows of one group.
type listGroup struct {
	listing sync.Mutex // held while the group is listed
	// Under listCache.mu: the objects its last List found, by file name
	// (a file's go once taken), and how many Lists of it were done.
	files map[string][]listed
	lists int
}

// listed is one of a file's objects, as a List found it.
type listed struct {
	o   walname.Object
	key string
}

// cachedGroups bounds the groups a listCache keeps: the prefetch moves
// along the archive in order, so four is the group being fetched, the
// next, and room for a timeline switch.
const cachedGroups = 4

// groupPrefix is what the names of a segment's group share, and false
// for a file that is not a segment (history, backup label, partial).
func groupPrefix(name string) (string, bool) {
	if len(name) != 24 {
		return "", false
	}
	if _, err := walname.ParseName(name); err != nil {
		return "", false
	}
	return name[:23], true
}

// find is Archive.find through the cache c (nil: straight to the store),
// for a fetch: the objects of name as its group's List found them. It
// answers only for a segment it saw listed, and once: a segment it did
// not see, or asked for again (a fetch tried again), is listed afresh,
// since it may have been archived, or removed, since.
func (c *listCache) find(ctx context.Context, a *Archive, dir, name string) ([]walname.Object, []string, error) {
	prefix, ok := groupPrefix(name)
	if c == nil || !ok {
		return a.find(ctx, dir, name)
	}
	g := c.group(dir + prefix)
	objs, keys, found, seen := c.take(g, name)
	if found {
		return objs, keys, nil
	}
	// Not seen: list the group, unless another fetch of it did since
	// this one looked (fetches of a group's segments at once share a
	// List).
	if err := c.list(ctx, a, dir, prefix, g, seen); err != nil {
		return nil, nil, err
	}
	objs, keys, _, _ = c.take(g, name) // none: not archived when listed
	return objs, keys, nil
}

// findForPush is Archive.find through the cache c (nil: straight to the
// store), for a push, whose claim (see Archive.claim) decides for what was
// archived after any List: what matters of the listing is only what was
// archived before claims existed. A file its group's List, of whenever,
// did not find is not looked up again; one it found is, so that a push
// that skips its upload skips it for what is archived now.
func (c *listCache) findForPush(ctx context.Context, a *Archive, dir, name string) ([]walname.Object, []string, error) {
	prefix, ok := groupPrefix(name)
	if c == nil || !ok {
		return a.find(ctx, dir, name)
	}
	g := c.group(dir + prefix)
	if err := c.list(ctx, a, dir, prefix, g, 0); err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	_, found := g.files[name]
	c.mu.Unlock()
	if found {
		return a.find(ctx, dir, name)
	}
	return nil, nil, nil
}

// list lists group g (the names in dir that begin with prefix) unless it
// was listed more than seen times.
func (c *listCache) list(ctx context.Context, a *Archive, dir, prefix string, g *listGroup, seen int) error {
	g.listing.Lock()
	defer g.listing.Unlock()
	if c.lists(g) > seen {
		return nil
	}
	infos, err := a.Store.List(ctx, a.Root+dir+prefix)
	if err != nil {
		return err
	}
	files := objectsByName(infos)
	c.mu.Lock()
	g.files, g.lists = files, g.lists+1
	c.mu.Unlock()
	return nil
}

// group returns the group named key, made if new: the oldest one goes
// past cachedGroups.
func (c *listCache) group(key string) *listGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.groups[key]; ok {
		return g
	}
	if c.groups == nil {
		c.groups = map[string]*listGroup{}
	}
	if len(c.order) == cachedGroups {
		delete(c.groups, c.order[0])
		c.order = c.order[1:]
	}
	g := &listGroup{}
	c.groups[key] = g
	c.order = append(c.order, key)
	return g
}

// take returns, and forgets, name's objects as g's last List found them
// (found false if it found none), and how many Lists of g were done.
func (c *listCache) take(g *listGroup, name string) (objs []walname.Object, keys []string, found bool, lists int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	files, found := g.files[name]
	delete(g.files, name)
	objs, keys = split(files)
	return objs, keys, found, g.lists
}

// lists is how many Lists of g were done.
func (c *listCache) lists(g *listGroup) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return g.lists
}

// objectsByName is a List's archived objects by file name, sizes filled
// in; claims and temporary files are not objects.
func objectsByName(infos []sdk.ObjectInfo) map[string][]listed {
	files := map[string][]listed{}
	for _, in := range infos {
		o, err := walname.ParseObject(path.Base(in.Key))
		if err != nil {
			continue
		}
		o.Size = in.Size
		files[o.Name] = append(files[o.Name], listed{o, in.Key})
	}
	return files
}

// split is a file's objects and their keys, in the List's order.
func split(files []listed) (objs []walname.Object, keys []string) {
	for _, l := range files {
		objs = append(objs, l.o)
		keys = append(keys, l.key)
	}
	return objs, keys
}
