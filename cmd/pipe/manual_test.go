package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/spf13/cobra"
	"github.com/zclconf/go-cty/cty"

	"github.com/pipebackup/pipe/pipefile"
)

// TestManual keeps README.md and the manual under docs/ true to the code:
// every relative link resolves (the file exists, and a #anchor names a
// heading of the target), and every ```hcl snippet passes `pipe validate`
// in a scratch folder. A snippet that is deliberately incomplete is marked
// ```hcl fragment, preceded by <!-- fragment: why -->; it must still parse
// once its … elisions are dropped, and every block, attribute and endpoint
// type it names must exist. bench/reports/HISTORY.md, which the manual
// links to, has its links checked too.
func TestManual(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{"README.md", "bench/reports/HISTORY.md"}
	docs, _ := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	more, _ := filepath.Glob(filepath.Join(repo, "docs", "*", "*.md"))
	for _, p := range append(docs, more...) {
		rel, _ := filepath.Rel(repo, p)
		pages = append(pages, filepath.ToSlash(rel))
	}
	if len(docs) == 0 {
		t.Fatal("no pages under docs/")
	}
	headings := map[string]map[string]bool{} // page → anchors, read once
	anchors := func(path string) (map[string]bool, error) {
		if a, ok := headings[path]; ok {
			return a, nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(parseMarkdown(string(src)))
		headings[path] = a
		return a, nil
	}
	for _, page := range pages {
		src, err := os.ReadFile(filepath.Join(repo, page))
		if err != nil {
			t.Fatal(err)
		}
		md := parseMarkdown(string(src))
		t.Run(page, func(t *testing.T) {
			for _, p := range linkProblems(repo, page, md, anchors) {
				t.Error(p)
			}
			if page == "bench/reports/HISTORY.md" {
				return // the reports keep their snippets as they ran
			}
			if strings.HasPrefix(page, "docs/") && !opensWithGoal(string(src)) {
				t.Errorf("%s: a page of the manual starts, after its title, with what the reader will be able to do: \"After this page you can …\"", page)
			}
			for _, f := range md.fences {
				if !strings.HasPrefix(f.info, "hcl") && f.info != "" {
					continue
				}
				t.Run(fmt.Sprintf("%s@%d", strings.ReplaceAll(f.info, " ", "-"), f.line), func(t *testing.T) {
					for _, p := range fenceProblems(t, fmt.Sprintf("%s:%d", page, f.line), f) {
						t.Error(p)
					}
				})
			}
		})
	}
}

// opensWithGoal reports whether the first paragraph after the title says
// what the page lets the reader do.
func opensWithGoal(src string) bool {
	_, rest, _ := strings.Cut(src, "\n")
	return strings.HasPrefix(strings.TrimSpace(rest), "After this page you can")
}

// markdown is what the checks need of a page: its prose (code blocks and
// spans blanked out, line breaks kept), its headings and its fenced blocks.
type markdown struct {
	prose    string
	headings []string
	fences   []fence
}

type fence struct {
	line    int    // of the opening fence
	info    string // the info string: "hcl", "hcl fragment", "sh", …
	body    string
	comment string // an HTML comment on the line before the fence, if any
}

var (
	fenceRE   = regexp.MustCompile("^\\s*(```+|~~~+)\\s*(.*)$")
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	commentRE = regexp.MustCompile(`^\s*<!--(.*)-->\s*$`)
)

func parseMarkdown(src string) markdown {
	var md markdown
	var prose []string
	lines := strings.Split(src, "\n")
	prev := "" // the last non-blank line outside a fence
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			if h := headingRE.FindStringSubmatch(lines[i]); h != nil {
				md.headings = append(md.headings, h[1])
			}
			prose = append(prose, lines[i])
			if strings.TrimSpace(lines[i]) != "" {
				prev = lines[i]
			}
			continue
		}
		f := fence{line: i + 1, info: strings.TrimSpace(m[2])}
		if c := commentRE.FindStringSubmatch(prev); c != nil {
			f.comment = strings.TrimSpace(c[1])
		}
		prose = append(prose, "")
		var body []string
		for i++; i < len(lines); i++ {
			if c := strings.TrimSpace(lines[i]); strings.HasPrefix(c, m[1][:1]) && strings.Trim(c, m[1][:1]) == "" && len(c) >= len(m[1]) {
				break
			}
			body = append(body, lines[i])
			prose = append(prose, "")
		}
		prose = append(prose, "")
		f.body = strings.Join(body, "\n") + "\n"
		md.fences = append(md.fences, f)
		prev = ""
	}
	md.prose = blankSpans(strings.Join(prose, "\n"))
	return md
}

var htmlCommRE = regexp.MustCompile(`(?s)<!--.*?-->`)

// blankSpans replaces code spans and HTML comments with spaces, keeping
// line breaks, so that a `[x](y)` in code is not taken for a link.
func blankSpans(s string) string {
	blank := func(m string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, m)
	}
	s = htmlCommRE.ReplaceAllStringFunc(s, blank)
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '`' {
			b.WriteByte(s[i])
			i++
			continue
		}
		n := 0
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		delim := strings.Repeat("`", n)
		end := strings.Index(s[i+n:], delim)
		if end < 0 {
			b.WriteString(delim)
			i += n
			continue
		}
		b.WriteString(blank(s[i : i+n+end+n]))
		i += n + end + n
	}
	return b.String()
}

var (
	linkRE   = regexp.MustCompile(`\]\(\s*([^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	schemeRE = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
	mdLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// linkProblems checks every link of a page that is not to another site.
func linkProblems(repo, page string, md markdown, anchors func(string) (map[string]bool, error)) []string {
	var problems []string
	dir := filepath.Dir(filepath.Join(repo, page))
	for _, m := range linkRE.FindAllStringSubmatchIndex(md.prose, -1) {
		target := md.prose[m[2]:m[3]]
		line := 1 + strings.Count(md.prose[:m[0]], "\n")
		where := fmt.Sprintf("%s:%d: link %s", page, line, target)
		if strings.Contains(target, "github.com/pipebackup/pipe") {
			problems = append(problems, fmt.Sprintf("%s: link inside the repository with a relative path", where))
			continue
		}
		if schemeRE.MatchString(target) {
			continue // http(s), mailto: outside the repository
		}
		path, anchor, _ := strings.Cut(target, "#")
		file := filepath.Join(repo, page)
		if path != "" {
			file = filepath.Join(dir, filepath.FromSlash(path))
		}
		if rel, err := filepath.Rel(repo, file); err != nil || strings.HasPrefix(rel, "..") {
			problems = append(problems, fmt.Sprintf("%s: points outside the repository", where))
			continue
		}
		fi, err := os.Stat(file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		if anchor == "" {
			continue
		}
		if fi.IsDir() || !strings.HasSuffix(file, ".md") {
			problems = append(problems, fmt.Sprintf("%s: an anchor into something that is not a Markdown page", where))
			continue
		}
		a, err := anchors(file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		if !a[anchor] {
			problems = append(problems, fmt.Sprintf("%s: no heading of %s has the anchor #%s (it has: %s)", where, filepath.Base(file), anchor, strings.Join(sortedSet(a), ", ")))
		}
	}
	return problems
}

// headingAnchors returns the anchors GitHub gives a page's headings:
// lower case, punctuation dropped, spaces as hyphens, repeats numbered.
func headingAnchors(md markdown) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, h := range md.headings {
		h = mdLinkRE.ReplaceAllString(h, "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func sortedSet(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// fenceProblems checks one fenced block: ```hcl must be a valid file,
// ```hcl fragment a marked, well-formed fragment, and an unlabelled block
// must not be HCL in disguise. t is for the scratch folder only.
func fenceProblems(t *testing.T, where string, f fence) []string {
	switch {
	case f.info == "hcl":
		return validateSnippet(t, where, f.body)
	case f.info == "hcl fragment":
		var problems []string
		if why, ok := strings.CutPrefix(f.comment, "fragment:"); !ok || strings.TrimSpace(why) == "" {
			problems = append(problems, fmt.Sprintf("%s: a ```hcl fragment needs <!-- fragment: why it is incomplete --> on the line before it", where))
		}
		return append(problems, fragmentProblems(t, where, f.body)...)
	case strings.HasPrefix(f.info, "hcl"):
		return []string{fmt.Sprintf("%s: info string %q: write ```hcl for a complete file or ```hcl fragment for a marked fragment", where, f.info)}
	case f.info == "":
		if file, diags := hclsyntax.ParseConfig([]byte(f.body), "x.hcl", hcl.InitialPos); !diags.HasErrors() {
			if body, ok := file.Body.(*hclsyntax.Body); ok && len(body.Blocks) > 0 {
				return []string{fmt.Sprintf("%s: this block is HCL: label it ```hcl (checked by pipe validate) or ```hcl fragment", where)}
			}
		}
	}
	return nil
}

// scratch prepares a folder for a snippet: the files its file() calls
// read (key pairs made by pipe keygen for *.pub and *.key, signing key
// pairs for signing*.pub and signing*.key), the environment
// its env() calls read, and a placeholder for each variable without a
// default. It returns the --var flags.
func scratch(t *testing.T, where string, body *hclsyntax.Body) []string {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	var vars []string
	hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
		call, ok := n.(*hclsyntax.FunctionCallExpr)
		if !ok || len(call.Args) == 0 {
			return nil
		}
		arg, diags := call.Args[0].Value(nil)
		if diags.HasErrors() || arg.Type() != cty.String || !arg.IsKnown() {
			return nil // an argument made of variables: nothing to prepare
		}
		name := arg.AsString()
		switch {
		case call.Name == "env" && len(call.Args) == 1:
			if _, set := os.LookupEnv(name); !set {
				t.Setenv(name, "placeholder-"+strings.ToLower(name))
			}
		case call.Name == "file" && (strings.HasSuffix(name, ".pub") || strings.HasSuffix(name, ".key")):
			prefix := strings.TrimSuffix(strings.TrimSuffix(name, ".pub"), ".key")
			args := []string{"keygen", "--if-missing", "-o", prefix}
			if strings.HasPrefix(filepath.Base(prefix), "signing") {
				args = append(args, "--signing") // keys/signing.key: sign { key }, trust { keys }
			}
			if strings.HasPrefix(filepath.Base(prefix), "dedup") {
				args = append(args, "--dedup") // keys/dedup.key: dedup { key }
			}
			var out, errb bytes.Buffer
			if code := execute(&out, &errb, args); code != 0 {
				t.Fatalf("%s: pipe keygen -o %s: exit %d\n%s", where, prefix, code, errb.String())
			}
		case call.Name == "file":
			os.MkdirAll(filepath.Dir(name), 0o755)
			if err := os.WriteFile(name, []byte("placeholder\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	for _, b := range body.Blocks {
		if b.Type != "variable" || len(b.Labels) != 1 {
			continue
		}
		if _, ok := b.Body.Attributes["default"]; ok {
			continue
		}
		value := "placeholder"
		if a, ok := b.Body.Attributes["type"]; ok {
			switch typeName(a) {
			case "number":
				value = "1"
			case "bool":
				value = "true"
			case "list", "set", "tuple":
				value = `["placeholder"]`
			case "map", "object":
				value = `{ key = "placeholder" }`
			}
		}
		vars = append(vars, "--var", b.Labels[0]+"="+value)
	}
	return vars
}

// typeName is the type constructor a variable's type attribute names:
// number, bool, list, map, ….
func typeName(a *hclsyntax.Attribute) string {
	switch e := a.Expr.(type) {
	case *hclsyntax.ScopeTraversalExpr:
		return e.Traversal.RootName()
	case *hclsyntax.FunctionCallExpr:
		return e.Name
	}
	return ""
}

// validateSnippet runs pipe validate on a complete snippet.
func validateSnippet(t *testing.T, where, src string) []string {
	file, diags := hclsyntax.ParseConfig([]byte(src), "snippet.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		return []string{fmt.Sprintf("%s: not valid HCL: %s", where, diags.Error())}
	}
	vars := scratch(t, where, file.Body.(*hclsyntax.Body))
	if err := os.WriteFile("snippet.hcl", []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := execute(&out, &errb, append([]string{"validate", "snippet.hcl"}, vars...)); code != 0 {
		return []string{fmt.Sprintf("%s: pipe validate snippet.hcl %s: exit %d (mark it ```hcl fragment only if it is deliberately incomplete)\n%s\n%s", where, strings.Join(vars, " "), code, numbered(src), errb.String())}
	}
	return nil
}

// fragmentAllowed are the diagnostics a marked fragment may have: what
// is missing from it, never what is wrong in it.
var fragmentAllowed = map[string]bool{
	"Missing required argument": true,
	"Missing source":            true,
	"Missing sink":              true,
	"Missing store":             true, // an archive's elided store
	"No pipeline":               true,
	"Variable not set":          true,
	"Invalid plugin pin":        true, // a pin's elided hash, or a plugin not built here
}

// fragmentProblems drops the … elisions outside strings, requires the rest
// to parse, wraps a fragment of a pipeline's body in a pipeline block, and
// loads it against the endpoints' schemas: only missing pieces may be
// reported.
func fragmentProblems(t *testing.T, where, src string) []string {
	src = dropElisions(src)
	file, diags := hclsyntax.ParseConfig([]byte(src), "fragment.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		return []string{fmt.Sprintf("%s: with its … elisions dropped, the fragment does not parse:\n%s\n%s", where, numbered(src), diags.Error())}
	}
	body := file.Body.(*hclsyntax.Body)
	top := len(body.Attributes) > 0
	for _, b := range body.Blocks {
		if b.Type != "variable" && b.Type != "plugin" && b.Type != "pipeline" && b.Type != "archive" {
			top = true
		}
	}
	if top {
		src = "pipeline \"fragment\" {\n" + src + "}\n"
	}
	vars := scratch(t, where, body)
	values := map[string]string{}
	for i := 1; i < len(vars); i += 2 {
		k, v, _ := strings.Cut(vars[i], "=")
		values[k] = v
	}
	reg, err := newRegistry(slog.New(slog.DiscardHandler), false)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	_, diags = pipefile.LoadSource("fragment.hcl", []byte(src), pipefile.Options{Vars: values, Now: time.Now(), Schemas: reg})
	var problems []string
	for _, d := range diags {
		if d.Severity == hcl.DiagError && !fragmentAllowed[d.Summary] {
			problems = append(problems, fmt.Sprintf("%s: %s: %s\n%s", where, d.Summary, d.Detail, numbered(src)))
		}
	}
	return problems
}

// dropElisions removes … outside quoted strings.
func dropElisions(src string) string {
	var b strings.Builder
	inString, escaped := false, false
	for _, r := range src {
		switch {
		case inString && escaped:
			escaped = false
		case inString && r == '\\':
			escaped = true
		case r == '"':
			inString = !inString
		case r == '\n':
			inString = false
		case r == '…' && !inString:
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimRight(src, "\n"), "\n") {
		fmt.Fprintf(&b, "%4d | %s\n", i+1, l)
	}
	return b.String()
}

// TestManualChecks shows that TestManual's checks catch what they are for:
// a pass of TestManual means something only if a broken link, a wrong
// attribute or an unmarked fragment would have failed it.
func TestManualChecks(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	page := "docs/page.md" // as if it were a page of the manual
	links := parseMarkdown(strings.Join([]string{
		"[fine](../README.md) and [a folder](../examples) and [a site](https://example.com/x)",
		"[missing](nosuch.md) and [bad anchor](../README.md#no-such-heading)",
		"[a good anchor](../README.md#a-first-backup-and-restore), [in a code span: `[x](nosuch.md)`] ok",
		"[text broken",
		"over lines](nosuch-either.md) and [absolute](https://github.com/pipebackup/pipe/blob/main/README.md)",
		"[outside](../../elsewhere.md)",
		"```",
		"[in a code block](nosuch.md)",
		"```",
	}, "\n"))
	anchors := func(path string) (map[string]bool, error) {
		src, err := os.ReadFile(path)
		return headingAnchors(parseMarkdown(string(src))), err
	}
	got := strings.Join(linkProblems(repo, page, links, anchors), "\n")
	for _, want := range []string{"nosuch.md: ", "#no-such-heading", "nosuch-either.md", "relative path", "outside the repository"} {
		if !strings.Contains(got, want) {
			t.Errorf("link problems do not mention %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 5 {
		t.Errorf("%d link problems, want 5:\n%s", n, got)
	}

	if a := headingAnchors(parseMarkdown("# One stream (`jobs = 1`, the default)\n## Tuning with `pipe bench`\n## Tuning with `pipe bench`\n")); !a["one-stream-jobs--1-the-default"] || !a["tuning-with-pipe-bench"] || !a["tuning-with-pipe-bench-1"] {
		t.Errorf("anchors: %v", sortedSet(a))
	}

	for _, tc := range []struct {
		name     string
		fence    fence
		problems bool
	}{
		{"valid file", fence{info: "hcl", body: "pipeline \"p\" {\n  source \"fs\" { path = \"in\" }\n  sink \"fs\" { path = \"out/\" }\n}\n"}, false},
		{"with keys and variables", fence{info: "hcl", body: "variable \"n\" { type = number }\nvariable \"s\" { sensitive = true }\npipeline \"p\" {\n  streams = var.n\n  source \"exec\" {\n    command = [\"true\"]\n    env = { X = var.s, Y = env(\"SOME_UNSET_VARIABLE\") }\n  }\n  encrypt { recipients = [file(\"k/x.pub\")] }\n  sink \"fs\" { path = \"out/\" }\n}\n"}, false},
		{"a typo", fence{info: "hcl", body: "pipeline \"p\" {\n  source \"fs\" { pth = \"in\" }\n  sink \"fs\" { path = \"out/\" }\n}\n"}, true},
		{"incomplete, unmarked", fence{info: "hcl", body: "sink \"s3\" { bucket = \"b\" }\n"}, true},
		{"marked fragment", fence{info: "hcl fragment", comment: "fragment: the key is elided", body: "sink \"s3\" {\n  bucket = \"b\"\n  …\n}\n"}, false},
		{"fragment without its comment", fence{info: "hcl fragment", body: "sink \"s3\" { bucket = \"b\" }\n"}, true},
		{"fragment with a wrong attribute", fence{info: "hcl fragment", comment: "fragment: x", body: "sink \"s3\" {\n  buckett = \"b\"\n  …\n}\n"}, true},
		{"fragment with an unknown endpoint", fence{info: "hcl fragment", comment: "fragment: x", body: "source \"nosuch\" { … }\n"}, true},
		{"fragment that does not parse", fence{info: "hcl fragment", comment: "fragment: x", body: "sink \"s3\" { bucket = }\n"}, true},
		{"another info string", fence{info: "hcl2"}, true},
		{"HCL in an unlabelled block", fence{body: "pipeline \"p\" {\n}\n"}, true},
		{"plan output in an unlabelled block", fence{body: "pipeline \"p\"\n  profile     balanced (default)\n"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fenceProblems(t, tc.name, tc.fence)
			if (len(got) > 0) != tc.problems {
				t.Errorf("problems: %q, want problems: %v", got, tc.problems)
			}
		})
	}
}

// TestManualCommands keeps docs/commands.md in step with the CLI: every
// command and every flag that --help shows is in it.
func TestManualCommands(t *testing.T) {
	page, err := os.ReadFile("../../docs/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)
	root, stop := newRootCmd(io.Discard, io.Discard)
	defer stop()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		if !strings.Contains(doc, c.CommandPath()) {
			t.Errorf("docs/commands.md does not mention %q", c.CommandPath())
		}
		// The flags --help lists (hidden ones are not).
		for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([\w-]+)`).FindAllStringSubmatch(c.LocalFlags().FlagUsages(), -1) {
			if m[1] != "help" && !strings.Contains(doc, "--"+m[1]) {
				t.Errorf("docs/commands.md does not mention %s --%s", c.CommandPath(), m[1])
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// docs/architecture.md names every package of the module (a directory
// with Go files that are not all tests), so that a newcomer finds each
// there: a package added without a row fails this.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(repo, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9./-]+?)/?`").FindAllStringSubmatch(string(page), -1) {
		named[m[1]] = true
	}
	err = filepath.WalkDir(repo, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "bin", "results", "node_modules":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && p != repo {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(repo, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		if rel == "." || named[rel] {
			return nil
		}
		// A package under a named folder counts when the folder's row
		// is the package's (examples/, bench/, schemas/).
		for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
			if named[dir] && (dir == "examples" || dir == "bench" || dir == "schemas") {
				return nil
			}
		}
		t.Errorf("docs/architecture.md does not name the package %s: add it to the table of packages", rel)
		named[rel] = true // once
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
