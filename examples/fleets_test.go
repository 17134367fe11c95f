package examples_test

// The fleet examples (examples/fleets): a Kubernetes CronJob per database
// and a Nomad periodic job with a group per database, both running
// fleets/backup.hcl. Each job is read as its scheduler would run it: its
// command, its environment (secrets marked as such) and the files its
// mounts put in the container. The command must be a pipe run with flags
// pipe has, and `pipe validate` must pass on the mounted pipeline file, in
// the job's working directory, with exactly the job's variables; secrets
// must come from the scheduler's secret store; the memory limit must hold
// the budget `pipe plan` prints plus room for pg_dump.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"go.yaml.in/yaml/v3"
)

const (
	fleetPipeline = "fleets/backup.hcl"
	fleetK8s      = "fleets/kubernetes/cronjobs.yaml"
	fleetNomad    = "fleets/nomad/pipe-backup.nomad"

	// pgDumpRoom is what a job's memory limit must hold beyond pipe's
	// budget: pg_dump runs in the same container (its catalog cache grows
	// with the number of objects), and the kernel and Go need slack.
	pgDumpRoom = 128 << 20
)

// fleetJob is one database's job as its scheduler would run it.
type fleetJob struct {
	name        string
	argv        []string
	workDir     string            // the container's working directory
	files       map[string]string // container path → content, as the mounts put them
	env         []jobEnv
	memoryLimit int64 // bytes
}

type jobEnv struct {
	name, value string
	secret      bool // from the scheduler's secret store, not in the file
}

// pipeVar is a variable block of fleets/backup.hcl.
type pipeVar struct {
	def       cty.Value // cty.NilVal without a default
	sensitive bool
}

func fleetVars(t *testing.T) map[string]pipeVar {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCLFile(fleetPipeline)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	vars := map[string]pipeVar{}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "variable" {
			continue
		}
		var v pipeVar
		if a, ok := b.Body.Attributes["default"]; ok {
			v.def = eval(t, a.Expr, nil)
		}
		if a, ok := b.Body.Attributes["sensitive"]; ok {
			v.sensitive = eval(t, a.Expr, nil).True()
		}
		vars[b.Labels[0]] = v
	}
	if len(vars) == 0 {
		t.Fatalf("%s declares no variable", fleetPipeline)
	}
	return vars
}

func eval(t *testing.T, e hcl.Expression, ctx *hcl.EvalContext) cty.Value {
	t.Helper()
	v, diags := e.Value(ctx)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return v
}

// runFlags are the flags `pipe run --help` lists.
func runFlags(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(pipeBin, "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("pipe run --help: %v\n%s", err, out)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?(--[a-z][a-z-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	if !slices.Contains(flags, "--var") {
		t.Fatalf("pipe run --help lists no --var:\n%s", out)
	}
	return flags
}

// pipeEnv is this process's environment without PIPE_VAR_ variables: a job
// gets only its own.
func pipeEnv(env ...string) []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PIPE_VAR_") {
			out = append(out, e)
		}
	}
	return append(out, env...)
}

// checkJobs checks each job's command against fleets/backup.hcl and runs
// pipe validate and pipe plan on it as the job would.
func checkJobs(t *testing.T, jobs []fleetJob) {
	t.Helper()
	vars := fleetVars(t)
	flags := runFlags(t)
	pipeline, err := os.ReadFile(fleetPipeline)
	if err != nil {
		t.Fatal(err)
	}
	folders := map[string]string{}
	for _, j := range jobs {
		t.Run(j.name, func(t *testing.T) {
			if len(j.argv) < 3 || j.argv[0] != "pipe" || j.argv[1] != "run" {
				t.Fatalf("the command is not pipe run FILE: %q", j.argv)
			}
			file := j.argv[2]
			if !path.IsAbs(file) {
				file = path.Join(j.workDir, file)
			}
			if got, ok := j.files[file]; !ok {
				t.Fatalf("no mount puts a file at %s (mounted: %v)", file, slices.Sorted(maps.Keys(j.files)))
			} else if got != string(pipeline) {
				t.Fatalf("%s is not %s", file, fleetPipeline)
			}

			// The flags: each one pipe run has; variables from --var.
			given := map[string]string{} // variable → value
			var args []string            // for pipe validate
			progress, jsonOut := "", false
			for i := 3; i < len(j.argv); i++ {
				a := j.argv[i]
				name, value, hasValue := strings.Cut(a, "=")
				if !slices.Contains(flags, name) {
					t.Errorf("pipe run has no flag %s (it has %v)", name, flags)
					continue
				}
				if name == "--json" {
					jsonOut = true
					continue
				}
				if !hasValue {
					if i+1 == len(j.argv) {
						t.Fatalf("%s has no value", a)
					}
					i++
					value = j.argv[i]
				}
				switch name {
				case "--progress":
					progress = value
				case "--var":
					k, v, ok := strings.Cut(value, "=")
					if !ok {
						t.Errorf("--var %q is not name=value", value)
					}
					given[k] = v
					args = append(args, "--var", value)
					if vars[k].sensitive {
						t.Errorf("the sensitive variable %s is on the command line", k)
					}
				}
			}
			if progress != "never" || !jsonOut {
				t.Errorf("a scheduled run logs without progress bars and prints its summary as JSON: --progress %q, --json %v", progress, jsonOut)
			}

			// The environment: PIPE_VAR_ variables of the file, secrets from
			// the secret store; stand-ins for the secrets.
			var env []string
			for _, e := range j.env {
				k, ok := strings.CutPrefix(e.name, "PIPE_VAR_")
				if !ok {
					if looksSecret(e.name) && !e.secret {
						t.Errorf("%s is set literally in the job", e.name)
					}
					continue
				}
				if _, ok := vars[k]; !ok {
					t.Errorf("%s: %s declares no variable %q", e.name, fleetPipeline, k)
				}
				if vars[k].sensitive && !e.secret {
					t.Errorf("%s (sensitive) is set literally in the job, not from a secret", e.name)
				}
				if !e.secret && looksSecret(k) {
					t.Errorf("%s looks like a secret and is set literally in the job", e.name)
				}
				v := e.value
				if e.secret {
					v = password
				}
				if _, ok := given[k]; !ok { // the flag wins
					given[k] = v
				}
				env = append(env, e.name+"="+v)
			}
			for _, k := range slices.Sorted(maps.Keys(vars)) {
				if _, ok := given[k]; !ok && vars[k].def == cty.NilVal {
					t.Errorf("the variable %s has no default and the job does not give it", k)
				}
			}
			if t.Failed() {
				return
			}

			// Validate and plan as the job would: the mounted files in their
			// places, in the working directory.
			root := t.TempDir()
			for p, content := range j.files {
				dst := filepath.Join(root, filepath.FromSlash(p))
				os.MkdirAll(filepath.Dir(dst), 0o755)
				if err := os.WriteFile(dst, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dir := filepath.Join(root, filepath.FromSlash(j.workDir))
			run := func(cmd ...string) string {
				out, err := pipeIn(dir, pipeEnv(env...), append(append(cmd, filepath.Join(root, filepath.FromSlash(file))), args...)...)
				if err != nil {
					t.Fatalf("pipe %s as the job runs it: %v\n%s", strings.Join(cmd, " "), err, out)
				}
				if strings.Contains(out, password) {
					t.Errorf("pipe %s shows a secret:\n%s", strings.Join(cmd, " "), out)
				}
				return out
			}
			run("validate")
			var plan struct {
				Pipelines []struct {
					Memory struct {
						Budget int64 `json:"budget"`
					} `json:"memory_bytes"`
				} `json:"pipelines"`
			}
			if out := run("plan", "--json"); json.Unmarshal([]byte(out), &plan) != nil || len(plan.Pipelines) == 0 {
				t.Fatalf("pipe plan --json: %s", out)
			}
			var budget int64
			for _, p := range plan.Pipelines {
				budget += p.Memory.Budget
			}
			if budget == 0 || j.memoryLimit < budget+pgDumpRoom {
				t.Errorf("memory limit %d MiB: pipe plan's budget is %d MiB, and pg_dump needs %d MiB beside it",
					j.memoryLimit>>20, budget>>20, pgDumpRoom>>20)
			}

			// One folder in the bucket per job: retention and restores
			// take every run under it as this database's.
			folder := given["bucket"] + "/" + stringOr(given["prefix"], vars["prefix"].def) + "/" + given["database"]
			if other, ok := folders[folder]; ok {
				t.Errorf("%s and %s write to the same folder %s", other, j.name, folder)
			}
			folders[folder] = j.name
		})
	}
}

func stringOr(s string, def cty.Value) string {
	if s != "" || def == cty.NilVal {
		return s
	}
	return def.AsString()
}

func looksSecret(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "password") || strings.Contains(n, "secret") || strings.Contains(n, "token") ||
		strings.Contains(n, "access_key") || n == "pgpassword"
}

// fleetKey is the public key the ConfigMap and the Nomad template carry:
// the one `pipe keygen` made for the examples.
func fleetKey(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(work, "keys", "backup.pub"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Kubernetes: the manifests' fields that make up a backup job.

type cronJob struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Schedule          string `yaml:"schedule"`
		ConcurrencyPolicy string `yaml:"concurrencyPolicy"`
		JobTemplate       struct {
			Spec struct {
				BackoffLimit          *int `yaml:"backoffLimit"`
				ActiveDeadlineSeconds int  `yaml:"activeDeadlineSeconds"`
				PodFailurePolicy      struct {
					Rules []struct {
						Action      string `yaml:"action"`
						OnExitCodes *struct {
							ContainerName string `yaml:"containerName"`
							Operator      string `yaml:"operator"`
							Values        []int  `yaml:"values"`
						} `yaml:"onExitCodes"`
					} `yaml:"rules"`
				} `yaml:"podFailurePolicy"`
				Template struct {
					Spec podSpec `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		} `yaml:"jobTemplate"`
	} `yaml:"spec"`
}

type podSpec struct {
	RestartPolicy   string `yaml:"restartPolicy"`
	SecurityContext struct {
		RunAsNonRoot bool   `yaml:"runAsNonRoot"`
		RunAsUser    *int64 `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []struct {
		Name       string   `yaml:"name"`
		Image      string   `yaml:"image"`
		Command    []string `yaml:"command"`
		Args       []string `yaml:"args"`
		WorkingDir string   `yaml:"workingDir"`
		Env        []struct {
			Name      string  `yaml:"name"`
			Value     *string `yaml:"value"`
			ValueFrom *struct {
				SecretKeyRef *struct {
					Name string `yaml:"name"`
					Key  string `yaml:"key"`
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Resources struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	} `yaml:"containers"`
	Volumes []podVolume `yaml:"volumes"`
}

type podVolume struct {
	Name      string `yaml:"name"`
	ConfigMap *struct {
		Name  string `yaml:"name"`
		Items []struct {
			Key  string `yaml:"key"`
			Path string `yaml:"path"`
		} `yaml:"items"`
	} `yaml:"configMap"`
	EmptyDir *struct {
		Medium string `yaml:"medium"`
	} `yaml:"emptyDir"`
}

// quantity parses a Kubernetes memory quantity (512Mi, 1Gi, 500M).
func quantity(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * u.mult, err
		}
	}
	return 0, fmt.Errorf("quantity %q", s)
}

func k8sJobs(t *testing.T) []fleetJob {
	t.Helper()
	f, err := os.Open(fleetK8s)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pipeline, err := os.ReadFile(fleetPipeline)
	if err != nil {
		t.Fatal(err)
	}
	// What README.md's kubectl create configmap puts in it.
	configMaps := map[string]map[string]string{
		"pipe-backup": {"backup.hcl": string(pipeline), "backup.pub": fleetKey(t)},
	}
	var jobs []fleetJob
	dec := yaml.NewDecoder(f)
	for {
		var doc cronJob
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", fleetK8s, err)
		}
		if doc.Kind != "CronJob" {
			t.Errorf("%s holds a %s: only CronJobs (a Secret would put secrets in the file)", fleetK8s, doc.Kind)
			continue
		}
		name := doc.Metadata.Name
		spec := doc.Spec.JobTemplate.Spec
		pod := spec.Template.Spec
		// Every check reports, and the container is looked at only when
		// there is exactly one.
		if len(pod.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", name, len(pod.Containers))
		}
		if doc.Spec.ConcurrencyPolicy != "Forbid" {
			t.Errorf("%s: concurrencyPolicy %q, want Forbid", name, doc.Spec.ConcurrencyPolicy)
		}
		if spec.BackoffLimit == nil {
			t.Errorf("%s: no backoffLimit", name)
		}
		if spec.ActiveDeadlineSeconds <= 0 {
			t.Errorf("%s: no activeDeadlineSeconds", name)
		}
		if pod.RestartPolicy != "Never" {
			t.Errorf("%s: restartPolicy %q, want Never", name, pod.RestartPolicy)
		}
		if !pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser == 0 {
			t.Errorf("%s: the pod does not run as a non-root user", name)
		}
		c := pod.Containers[0]
		if !c.SecurityContext.ReadOnlyRootFilesystem || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
			t.Errorf("%s: want readOnlyRootFilesystem and no privilege escalation", name)
		}
		// Exit code 2 (an invalid file or usage) fails the job at once.
		failsOn2 := false
		for _, r := range spec.PodFailurePolicy.Rules {
			if r.Action == "FailJob" && r.OnExitCodes != nil && r.OnExitCodes.ContainerName == c.Name &&
				r.OnExitCodes.Operator == "In" && slices.Contains(r.OnExitCodes.Values, 2) {
				failsOn2 = true
			}
		}
		if !failsOn2 {
			t.Errorf("%s: no podFailurePolicy rule fails the job on exit code 2", name)
		}

		j := fleetJob{name: "kubernetes/" + name, argv: append(slices.Clone(c.Command), c.Args...), workDir: c.WorkingDir, files: map[string]string{}}
		if j.workDir == "" {
			j.workDir = "/"
		}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
				j.env = append(j.env, jobEnv{name: e.Name, secret: true})
			case e.Value != nil:
				j.env = append(j.env, jobEnv{name: e.Name, value: *e.Value})
			default:
				t.Errorf("%s: env %s is neither a value nor a secretKeyRef", name, e.Name)
			}
		}
		lim, err := quantity(c.Resources.Limits["memory"])
		if err != nil {
			t.Errorf("%s: memory limit: %v", name, err)
		}
		if c.Resources.Requests["memory"] != c.Resources.Limits["memory"] {
			t.Errorf("%s: memory request %q, limit %q: request the limit", name, c.Resources.Requests["memory"], c.Resources.Limits["memory"])
		}
		if c.Resources.Limits["cpu"] == "" || c.Resources.Requests["cpu"] == "" {
			t.Errorf("%s: no cpu request or limit", name)
		}
		j.memoryLimit = lim
		tmp := false
		for _, m := range c.VolumeMounts {
			i := slices.IndexFunc(pod.Volumes, func(v podVolume) bool { return v.Name == m.Name })
			if i < 0 {
				t.Fatalf("%s: no volume %s", name, m.Name)
			}
			v := pod.Volumes[i]
			switch {
			case v.ConfigMap != nil:
				data, ok := configMaps[v.ConfigMap.Name]
				if !ok {
					t.Fatalf("%s: unknown ConfigMap %s", name, v.ConfigMap.Name)
				}
				for _, it := range v.ConfigMap.Items {
					j.files[path.Join(m.MountPath, it.Path)] = data[it.Key]
				}
				if len(v.ConfigMap.Items) == 0 {
					for k, content := range data {
						j.files[path.Join(m.MountPath, k)] = content
					}
				}
			case v.EmptyDir != nil && m.MountPath == "/tmp":
				// On disk: a tmpfs would count against the memory limit.
				tmp = v.EmptyDir.Medium == ""
			}
		}
		if !tmp {
			t.Errorf("%s: the read-only root needs a writable /tmp (an emptyDir on disk): the plugin processes' sockets", name)
		}
		jobs = append(jobs, j)
	}
	if len(jobs) < 2 {
		t.Errorf("%s has %d CronJobs; the example shows one per database, at least two", fleetK8s, len(jobs))
	}
	return jobs
}

func TestFleetKubernetes(t *testing.T) {
	checkJobs(t, k8sJobs(t))
}

// Nomad: the jobspec is read with HCL as the nomad CLI reads it (variables
// with their defaults, the dynamic group per database, file() from the
// repository root), and each group becomes a job.

// nomadTemplateLine is a line of the secrets template: a variable from a
// Nomad Variable, JSON-quoted (the env file's parser reads JSON strings).
var (
	nomadWith = regexp.MustCompile(`^\{\{ with nomadVar "([^"]+)" \}\}$`)
	nomadLine = regexp.MustCompile(`^(\w+)=\{\{ \.(\w+) \| toJSON \}\}$`)
)

func nomadJobs(t *testing.T) []fleetJob {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCLFile(fleetNomad)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	body := f.Body.(*hclsyntax.Body)

	// The operator's working directory: the repository root, with the key
	// pair of the examples.
	op := t.TempDir()
	pipeline, err := os.ReadFile(fleetPipeline)
	if err != nil {
		t.Fatal(err)
	}
	for p, content := range map[string]string{"examples/" + fleetPipeline: string(pipeline), "keys/backup.pub": fleetKey(t)} {
		os.MkdirAll(filepath.Join(op, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(op, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fileFn := function.New(&function.Spec{
		Params: []function.Parameter{{Name: "path", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			b, err := os.ReadFile(filepath.Join(op, filepath.FromSlash(args[0].AsString())))
			return cty.StringVal(string(b)), err
		},
	})
	vars := map[string]cty.Value{}
	var job *hclsyntax.Block
	for _, b := range body.Blocks {
		switch b.Type {
		case "variable":
			if a, ok := b.Body.Attributes["default"]; ok {
				vars[b.Labels[0]] = eval(t, a.Expr, nil)
			}
		case "job":
			job = b
		}
	}
	if job == nil {
		t.Fatalf("%s has no job", fleetNomad)
	}
	jobID := job.Labels[0]
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(vars)},
		Functions: map[string]function.Function{"file": fileFn},
	}
	attr := func(b *hclsyntax.Block, name string, ctx *hcl.EvalContext) cty.Value {
		a, ok := b.Body.Attributes[name]
		if !ok {
			return cty.NilVal
		}
		return eval(t, a.Expr, ctx)
	}
	blocks := func(b *hclsyntax.Block, typ string) []*hclsyntax.Block {
		var out []*hclsyntax.Block
		for _, c := range b.Body.Blocks {
			if c.Type == typ {
				out = append(out, c)
			}
		}
		return out
	}
	one := func(b *hclsyntax.Block, typ string) *hclsyntax.Block {
		bs := blocks(b, typ)
		if len(bs) != 1 {
			t.Fatalf("%s: %d %s blocks in %s, want 1", fleetNomad, len(bs), typ, b.Type)
		}
		return bs[0]
	}

	if v := attr(job, "type", ctx); v == cty.NilVal || v.AsString() != "batch" {
		t.Errorf("the job is not a batch job")
	}
	periodic := one(job, "periodic")
	if v := attr(periodic, "prohibit_overlap", ctx); v == cty.NilVal || !v.True() {
		t.Errorf("periodic: want prohibit_overlap = true")
	}
	if attr(periodic, "crons", ctx) == cty.NilVal && attr(periodic, "cron", ctx) == cty.NilVal {
		t.Errorf("periodic: no cron")
	}

	dyn := one(job, "dynamic")
	if dyn.Labels[0] != "group" {
		t.Fatalf("the dynamic block makes %s, want group", dyn.Labels[0])
	}
	content := one(dyn, "content")
	var jobs []fleetJob
	for it := attr(dyn, "for_each", ctx).ElementIterator(); it.Next(); {
		k, v := it.Element()
		gctx := ctx.NewChild()
		gctx.Variables = map[string]cty.Value{"group": cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})}
		group := eval(t, dyn.Body.Attributes["labels"].Expr, gctx).Index(cty.NumberIntVal(0)).AsString()
		task := one(content, "task")
		config := one(task, "config")
		j := fleetJob{name: "nomad/" + group, files: map[string]string{}}

		if d := attr(task, "driver", gctx); d.AsString() != "docker" {
			t.Fatalf("%s: driver %s, want docker", group, d.AsString())
		}
		if u := attr(task, "user", gctx); u == cty.NilVal || u.AsString() == "root" || strings.HasPrefix(u.AsString(), "0") {
			t.Errorf("%s: the task does not run as a non-root user", group)
		}
		if v := attr(config, "readonly_rootfs", gctx); v == cty.NilVal || !v.True() {
			t.Errorf("%s: want readonly_rootfs = true", group)
		}
		j.argv = []string{attr(config, "command", gctx).AsString()}
		for _, a := range attr(config, "args", gctx).AsValueSlice() {
			j.argv = append(j.argv, a.AsString())
		}
		j.workDir = "/"
		if w := attr(config, "work_dir", gctx); w != cty.NilVal {
			j.workDir = w.AsString()
		}
		tmp := false
		for _, m := range blocks(config, "mount") {
			if attr(m, "target", gctx).AsString() == "/tmp" && attr(m, "type", gctx).AsString() == "tmpfs" {
				tmp = true
			}
		}
		if !tmp {
			t.Errorf("%s: the read-only root needs a writable /tmp: the plugin processes' sockets", group)
		}
		// Volumes relative to the task directory: host → container.
		binds := map[string]string{}
		if vs := attr(config, "volumes", gctx); vs != cty.NilVal {
			for _, v := range vs.AsValueSlice() {
				parts := strings.Split(v.AsString(), ":")
				binds[parts[0]] = parts[1]
			}
		}
		for _, e := range blocks(task, "env") {
			for name, a := range e.Body.Attributes {
				j.env = append(j.env, jobEnv{name: name, value: eval(t, a.Expr, gctx).AsString()})
			}
		}
		for _, tpl := range blocks(task, "template") {
			dest := attr(tpl, "destination", gctx).AsString()
			data := attr(tpl, "data", gctx).AsString()
			if v := attr(tpl, "env", gctx); v != cty.NilVal && v.True() {
				j.env = append(j.env, nomadSecrets(t, group, jobID, data)...)
				continue
			}
			if strings.Contains(data, "{{") {
				t.Errorf("%s: template %s: its file has {{, which the template would render", group, dest)
			}
			for host, target := range binds {
				if rel, ok := strings.CutPrefix(dest, host+"/"); ok {
					j.files[path.Join(target, rel)] = data
				}
			}
		}
		res := one(task, "resources")
		mib := attr(res, "memory", gctx)
		if v := attr(res, "memory_max", gctx); v != cty.NilVal {
			mib = v // the hard limit, when oversubscription allows more than memory
		}
		if mib == cty.NilVal {
			t.Fatalf("%s: no memory in resources", group)
		}
		n, _ := mib.AsBigFloat().Int64()
		j.memoryLimit = n << 20
		jobs = append(jobs, j)
	}
	if len(jobs) < 2 {
		t.Errorf("%s has %d groups; the example shows one per database, at least two", fleetNomad, len(jobs))
	}
	return jobs
}

// nomadSecrets reads the env template of a group: every line a variable
// from a Nomad Variable that the group can read without a policy.
func nomadSecrets(t *testing.T, group, jobID, data string) []jobEnv {
	t.Helper()
	var env []jobEnv
	in := ""
	for _, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		switch m := nomadWith.FindStringSubmatch(line); {
		case line == "":
		case m != nil:
			in = m[1]
			if in != "nomad/jobs/"+jobID && in != "nomad/jobs/"+jobID+"/"+group {
				t.Errorf("%s: nomadVar %q: the group reads nomad/jobs/%s and nomad/jobs/%s/%s", group, in, jobID, jobID, group)
			}
		case line == "{{ end }}":
			in = ""
		default:
			l := nomadLine.FindStringSubmatch(line)
			if l == nil || in == "" {
				t.Errorf("%s: the env template has a line that is not a Nomad Variable's item: %q", group, line)
				continue
			}
			env = append(env, jobEnv{name: l[1], secret: true})
			if l[1] == "PIPE_VAR_pg_password" && in != "nomad/jobs/"+jobID+"/"+group {
				t.Errorf("%s: the database password comes from %s, which every group reads", group, in)
			}
		}
	}
	return env
}

func TestFleetNomad(t *testing.T) {
	checkJobs(t, nomadJobs(t))
}

// No secret is in a fleet file: no age identity, no AWS key, no private
// key; a job without its variables fails as invalid (exit code 2, which
// the CronJobs' podFailurePolicy does not retry), while pipe validate,
// which needs no secret, passes.
func TestFleetNoSecrets(t *testing.T) {
	patterns := regexp.MustCompile(`AGE-SECRET-KEY-|AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----|` + regexp.QuoteMeta(password))
	var files []string
	err := filepath.WalkDir("fleets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files = append(files, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if m := patterns.Find(b); m != nil {
			t.Errorf("%s holds a secret: %q", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fleetPipeline, fleetK8s, fleetNomad, "fleets/README.md"} {
		if !slices.Contains(files, filepath.FromSlash(want)) {
			t.Errorf("examples/%s is missing", want)
		}
	}

	// The job's own command: without its variables the file is invalid
	// for a run (exit code 2), before anything is contacted.
	out, err := pipeIn(work, pipeEnv(), "run", abs(t, fleetPipeline), "--progress", "never")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out, "Variable not set") {
		t.Errorf("pipe run without variables: %v, want exit code 2 and \"Variable not set\"\n%s", err, out)
	}
	// pipe validate checks the file where the secrets are not (a CI job).
	if out, err := pipeIn(work, pipeEnv(), "validate", abs(t, fleetPipeline)); err != nil {
		t.Errorf("pipe validate without variables: %v\n%s", err, out)
	}
}
