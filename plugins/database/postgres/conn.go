package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pipebackup/pipe/plugins/internal/command"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// serverGone explains a connection that ended without the server's
// error: a backend terminated while it was blocked sending (as a COPY
// out that fills the socket is) drops its message and closes, and pgx
// then reports only an (unexpected) EOF. The words are libpq's, which
// users of psql and pg_dump know.
func serverGone(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("server closed the connection unexpectedly (%w): the backend terminated (pg_terminate_backend, a restart, a crash or the out-of-memory killer); the server's log says which", err)
	}
	return err
}

// connAttributes are the connection settings sources and sinks share.
func connAttributes() []sdk.Attribute {
	return []sdk.Attribute{
		{Name: "dsn", Type: sdk.String, Secret: true, Description: `Connection string: a URL ("postgres://user:pass@host:5432/db?sslmode=disable") or key=value pairs ("host=… dbname=…"). Secret: it may hold a password. Instead of it: host, port, user, password, database.`},
		{Name: "host", Type: sdk.String, Description: "Server host name or Unix socket folder."},
		{Name: "port", Type: sdk.Number, Description: "Server port (default 5432)."},
		{Name: "user", Type: sdk.String, Description: "User name."},
		{Name: "password", Type: sdk.String, Secret: true, Description: "Password; passed to the PostgreSQL tools in PGPASSWORD, never on a command line. Without it, PGPASSWORD or ~/.pgpass apply."},
		{Name: "database", Type: sdk.String, Public: true, Description: "Database name (overrides the dsn's)."},
		{Name: "sslmode", Type: sdk.String, Description: `disable, allow, prefer, require, verify-ca or verify-full (overrides the dsn's).`},
	}
}

type connConfig struct {
	DSN      string `pipe:"dsn"`
	Host     string `pipe:"host"`
	Port     int64  `pipe:"port"`
	User     string `pipe:"user"`
	Password string `pipe:"password"`
	Database string `pipe:"database"`
	SSLMode  string `pipe:"sslmode"`
}

// conn is how to reach the server: a connection string without the
// password, for command lines, and the password apart.
type conn struct {
	info     string // libpq conninfo, key=value, no password
	password string
	database string // the database connected to ("" leaves it to libpq's defaults)
}

// newConn checks the connection settings.
func newConn(c connConfig) (conn, sdk.Diagnostics) {
	pairs := map[string]string{}
	if c.DSN != "" {
		var err error
		if pairs, err = parseDSN(c.DSN); err != nil {
			return conn{}, sdk.AttrError("dsn", "invalid connection string", err.Error())
		}
	}
	set := func(k, v string) {
		if v != "" {
			pairs[k] = v
		}
	}
	set("host", c.Host)
	if c.Port != 0 {
		if c.Port < 1 || c.Port > 65535 {
			return conn{}, sdk.AttrError("port", "invalid port", fmt.Sprintf("port = %d is not a TCP port (1-65535)", c.Port))
		}
		set("port", strconv.FormatInt(c.Port, 10))
	}
	set("user", c.User)
	set("dbname", c.Database)
	switch c.SSLMode {
	case "", "disable", "allow", "prefer", "require", "verify-ca", "verify-full":
		set("sslmode", c.SSLMode)
	default:
		return conn{}, sdk.AttrError("sslmode", "invalid sslmode", fmt.Sprintf("%q is not one of disable, allow, prefer, require, verify-ca, verify-full", c.SSLMode))
	}
	if c.DSN == "" && c.Host == "" && c.Database == "" {
		return conn{}, sdk.AttrError("", "no database given", `set dsn = "postgres://user@host:5432/db", or host and database (the password in password or the environment, never in a command)`)
	}
	password := pairs["password"]
	delete(pairs, "password")
	if c.Password != "" {
		password = c.Password
	}
	return conn{info: conninfo(pairs), password: password, database: pairs["dbname"]}, nil
}

// withDatabase is the same server, another database.
func (c conn) withDatabase(db string) conn {
	pairs, _ := parseDSN(c.info)
	pairs["dbname"] = db
	c.info, c.database = conninfo(pairs), db
	return c
}

// env is what a PostgreSQL tool needs in its environment: the password and
// session settings (PGOPTIONS).
func (c conn) env(settings map[string]string) []string {
	var env []string
	if c.password != "" {
		env = append(env, "PGPASSWORD="+c.password)
	}
	if len(settings) > 0 {
		env = append(env, "PGOPTIONS="+pgoptions(settings))
	}
	return env
}

// tool is the command line of a PostgreSQL program against the server:
// the connection string (no password) and never a password prompt.
func (c conn) tool(program string, args ...string) []string {
	return append([]string{program, "--dbname=" + c.info, "--no-password"}, args...)
}

// spec runs a PostgreSQL tool against the server.
func (c conn) spec(argv []string, settings map[string]string) command.Spec {
	return command.Spec{Argv: argv, Env: c.env(settings), Secrets: []string{c.password}}
}

// connect opens a Go connection with the session settings.
func (c conn) connect(ctx context.Context, settings map[string]string) (*pgx.Conn, error) {
	return c.connectWith(ctx, settings, nil)
}

// connectWith is connect, with tweak applied to the connection's
// configuration.
func (c conn) connectWith(ctx context.Context, settings map[string]string, tweak func(*pgx.ConnConfig)) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(c.info)
	if err != nil {
		return nil, fmt.Errorf("connection string: %w", err)
	}
	if tweak != nil {
		tweak(cfg)
	}
	if c.password != "" {
		cfg.Password = c.password
	}
	for k, v := range settings {
		cfg.RuntimeParams[k] = v
	}
	pc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %s", scrub(err.Error(), c.password))
	}
	return pc, nil
}

func scrub(s, secret string) string { return sdk.Scrub(s, sdk.SecretStrings(secret)...) }

// conninfo writes pairs as a libpq key=value string, keys sorted.
func conninfo(pairs map[string]string) string {
	keys := make([]string, 0, len(pairs))
	for k := range pairs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		v := pairs[k]
		b.WriteString(k + "=")
		if v == "" || strings.ContainsAny(v, ` '\`) {
			v = "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
		}
		b.WriteString(v)
	}
	return b.String()
}

// urlKeys maps a URL's parts to libpq keywords.
var urlKeys = map[string]string{"dbname": "dbname", "host": "host", "port": "port", "user": "user", "password": "password"}

// parseDSN reads a libpq connection string, URL or key=value, into
// keyword/value pairs.
func parseDSN(s string) (map[string]string, error) {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		return parseURL(s)
	}
	pairs := map[string]string{}
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) {
			return pairs, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, fmt.Errorf("expected key=value at %q", clip(s[i:]))
		}
		key := strings.TrimSpace(s[i : i+eq])
		if key == "" || strings.ContainsAny(key, " \t'") {
			return nil, fmt.Errorf("invalid key before %q", clip(s[i+eq:]))
		}
		i += eq + 1
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		var v strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			closed := false
			for i < len(s) {
				switch s[i] {
				case '\\':
					if i+1 < len(s) {
						i++
						v.WriteByte(s[i])
					}
				case '\'':
					closed = true
				default:
					v.WriteByte(s[i])
				}
				i++
				if closed {
					break
				}
			}
			if !closed {
				return nil, fmt.Errorf("unterminated quoted value of %s", key)
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				v.WriteByte(s[i])
				i++
			}
		}
		pairs[key] = v.String()
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func parseURL(s string) (map[string]string, error) {
	u, err := url.Parse(s)
	if err != nil {
		// url.Parse repeats the input, password included.
		return nil, errors.New("not a valid URL (postgres://user:password@host:port/database?sslmode=…)")
	}
	pairs := map[string]string{}
	if u.User != nil {
		pairs["user"] = u.User.Username()
		if p, ok := u.User.Password(); ok {
			pairs["password"] = p
		}
	}
	if h := u.Hostname(); h != "" {
		pairs["host"] = h
	}
	if p := u.Port(); p != "" {
		pairs["port"] = p
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		pairs["dbname"] = db
	}
	for k, vs := range u.Query() {
		if len(vs) > 0 {
			if m, ok := urlKeys[k]; ok {
				k = m
			}
			pairs[k] = vs[len(vs)-1]
		}
	}
	for k := range pairs {
		if pairs[k] == "" && k != "password" {
			delete(pairs, k)
		}
	}
	return pairs, nil
}

func clip(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// pgoptions writes session settings as PGOPTIONS: -c name=value, spaces
// and backslashes escaped.
func pgoptions(settings map[string]string) string {
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	esc := strings.NewReplacer(`\`, `\\`, " ", `\ `)
	var parts []string
	for _, k := range keys {
		parts = append(parts, "-c "+esc.Replace(k+"="+settings[k]))
	}
	return strings.Join(parts, " ")
}

var versionRe = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// toolMajor runs "tool --version" and returns its major version.
func toolMajor(ctx context.Context, path string) (int, string, error) {
	out, err := command.Output(ctx, command.Spec{Argv: []string{path, "--version"}}, "")
	if err != nil {
		return 0, "", fmt.Errorf("running %s --version: %w", path, err)
	}
	out = strings.TrimSpace(out)
	m := versionRe.FindStringSubmatch(out)
	if m == nil {
		return 0, "", fmt.Errorf("%s --version printed %q, not a PostgreSQL version", path, out)
	}
	major, _ := strconv.Atoi(m[1])
	return major, out, nil
}

// lookTool checks that a PostgreSQL program can run, and returns the
// program to run for it (see resolveTool).
func lookTool(attr, path string) (string, sdk.Diagnostics) {
	found, err := exec.LookPath(path)
	if err != nil {
		return "", sdk.AttrError(attr, fmt.Sprintf("cannot run %q", path), "it is not an executable file and not found in PATH: install the PostgreSQL client tools (Debian: postgresql-client) or give the program's full path in "+attr)
	}
	return resolveTool(path, found), nil
}

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }
