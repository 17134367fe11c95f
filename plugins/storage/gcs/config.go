package gcs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/httptransport"
	"cloud.google.com/go/storage"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"

	"github.com/pipebackup/pipe/plugins/sdk"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20

	// defaultPartSize is the balanced profile's part size, for tools that
	// configure the endpoint without a profile.
	defaultPartSize    = 64 * mib
	defaultConcurrency = 4
	defaultTimeout     = 60 * time.Second
	defaultRetries     = 5

	// chunkUnit: resumable upload chunks are multiples of 256 KiB.
	chunkUnit = 256 * kib
	maxChunk  = 1 << 30
	minPart   = 64 * kib
	maxPart   = 1 << 30
	maxConc   = 256

	// streamOverhead is what one stream in flight holds besides its
	// chunk or parts: the connection's read and write buffers and the
	// HTTP machinery.
	streamOverhead = 1 * mib

	// emulatorEnv is the variable the library and gcloud read to talk to
	// an emulator (fake-gcs-server) instead of Google.
	emulatorEnv = "STORAGE_EMULATOR_HOST"
)

// config is what the source and the sink share: where the bucket is and
// how to reach it.
type config struct {
	Bucket          string        `pipe:"bucket"`
	Endpoint        string        `pipe:"endpoint"`
	CredentialsFile string        `pipe:"credentials_file"`
	CredentialsJSON string        `pipe:"credentials_json"`
	Timeout         time.Duration `pipe:"timeout"`
	Retries         int           `pipe:"retries"`
}

func commonAttributes() []sdk.Attribute {
	return []sdk.Attribute{
		{Name: "bucket", Type: sdk.String, Required: true, Description: `The bucket's name, without gs:// (e.g. "acme-backups").`},
		{Name: "endpoint", Type: sdk.String, Default: "", Description: `The JSON API's URL, for emulators and private endpoints: "http://127.0.0.1:4443" for fake-gcs-server (the /storage/v1/ path is added when missing). Empty: Google's, or STORAGE_EMULATOR_HOST when that is set. An http:// endpoint is used without credentials unless credentials_file or credentials_json is set.`},
		{Name: "credentials_file", Type: sdk.String, Default: "", Description: "A credentials JSON file (a service account key, an authorized user, workload identity federation). Empty: credentials_json, else Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login, or the metadata server on Google Cloud)."},
		{Name: "credentials_json", Type: sdk.String, Default: "", Secret: true, Description: "The content of a credentials JSON file, for credentials passed in a sensitive variable or the environment; never write it in the pipeline file. Not with credentials_file."},
		{Name: "timeout", Type: sdk.Duration, Default: defaultTimeout, Description: "How long a request may move no byte (connecting, sending, waiting for the reply, receiving) before it is abandoned and retried. A slow transfer that moves is never cut. 0 waits forever."},
		{Name: "retries", Type: sdk.Number, Default: int64(defaultRetries), Description: "How many times in a row a failed request (an upload chunk, a range of a restore, a listing) is retried, with exponential backoff, before the run fails."},
	}
}

// newConfig decodes the shared settings; attributes the host did not send
// (a caller that skips the schema's defaults) keep their defaults.
func newConfig(cfg sdk.Config) (*config, sdk.Diagnostics) {
	c := &config{Timeout: defaultTimeout, Retries: defaultRetries}
	if d := decode(cfg, c); d.HasErrors() {
		return nil, d
	}
	return c, nil
}

func decode(cfg sdk.Config, dst any) sdk.Diagnostics {
	if err := cfg.Decode(dst); err != nil {
		return sdk.AttrError("", "invalid configuration", err.Error())
	}
	return nil
}

// check reports mistakes in c that need no network.
func (c *config) check() sdk.Diagnostics {
	var d sdk.Diagnostics
	if err := checkBucket(c.Bucket); err != nil {
		d = append(d, sdk.AttrError("bucket", "invalid bucket name", err.Error())...)
	}
	if c.Endpoint != "" {
		if _, err := endpointURL(c.Endpoint); err != nil {
			d = append(d, sdk.AttrError("endpoint", "invalid endpoint", err.Error())...)
		}
	}
	if c.CredentialsFile != "" && c.CredentialsJSON != "" {
		d = append(d, sdk.AttrError("credentials_json", "two sources of credentials", "set credentials_file or credentials_json, not both")...)
	}
	if c.Timeout < 0 {
		d = append(d, sdk.AttrError("timeout", "invalid timeout", "the timeout cannot be negative; 0 waits forever")...)
	}
	if c.Retries < 0 || c.Retries > 100 {
		d = append(d, sdk.AttrError("retries", "invalid retries", fmt.Sprintf("retries = %d must be between 0 and 100", c.Retries))...)
	}
	return d
}

// checkBucket applies Cloud Storage's bucket naming rules, and catches the
// usual slips (a gs:// URL, a path after the name).
func checkBucket(name string) error {
	switch {
	case strings.HasPrefix(name, "gs://"):
		return fmt.Errorf("write the bucket's name without gs:// (bucket = %q)", strings.SplitN(strings.TrimPrefix(name, "gs://"), "/", 2)[0])
	case strings.Contains(name, "/"):
		return fmt.Errorf("%q holds a path: the bucket is the part before the first /, and the rest goes in the sink's key or the source's prefix", name)
	case len(name) < 3 || len(name) > 222:
		return fmt.Errorf("%q: bucket names have 3 to 63 characters (222 with dots)", name)
	case !strings.Contains(name, ".") && len(name) > 63:
		return fmt.Errorf("%q: bucket names without dots have at most 63 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%q: bucket names use lowercase letters, digits, -, _ and . only", name)
		}
	}
	first, last := name[0], name[len(name)-1]
	if !isAlnum(first) || !isAlnum(last) {
		return fmt.Errorf("%q: bucket names start and end with a letter or a digit", name)
	}
	return nil
}

func isAlnum(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }

// endpointURL turns what a user may write for an endpoint (the host, the
// emulator's base URL, or the JSON API's URL) into the JSON API's URL.
func endpointURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		return nil, fmt.Errorf("%q has no scheme: write http://%s for an emulator, or https://%s", s, s, s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %v", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: the scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q has no host", s)
	}
	if u.User != nil {
		return nil, fmt.Errorf("the endpoint may not hold a user or password; use credentials_file or credentials_json")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/storage/v1/"
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// authMode says where a client's credentials come from.
type authMode int

const (
	authExplicit  authMode = iota // credentials_file or credentials_json
	authADC                       // Application Default Credentials, required
	authADCOrNone                 // ADC if there are any, else anonymous
	authAnonymous                 // no credentials at all
)

// chooseAuth decides where credentials come from. An emulator gets none
// (as the library does with STORAGE_EMULATOR_HOST), and bearer tokens
// never travel over plain http unless the user set credentials
// explicitly.
func chooseAuth(c *config, emulatorHost string) authMode {
	explicit := c.CredentialsFile != "" || c.CredentialsJSON != ""
	switch {
	case c.Endpoint == "" && emulatorHost != "":
		return authAnonymous
	case explicit:
		return authExplicit
	case c.Endpoint == "":
		return authADC
	case strings.HasPrefix(c.Endpoint, "http://"):
		return authAnonymous
	}
	return authADCOrNone
}

// scopes: objects are read, written, listed and deleted; bucket metadata
// is read to check that the bucket exists.
var scopes = []string{storage.ScopeReadWrite}

// client is a configured connection to one bucket.
type client struct {
	sc      *storage.Client
	bkt     *storage.BucketHandle
	bucket  string
	where   string // where requests go, for messages
	auth    string // where the credentials came from, for messages
	retries int
	scrub   *scrubber
	tr      *http.Transport
	// compressed: read objects as stored even if their Content-Encoding
	// is gzip. Only the XML API can: with JSON reads the library refuses
	// the Accept-Encoding header this needs.
	compressed bool
}

// connect makes a client. It does no I/O beyond reading a credentials
// file (and, for Application Default Credentials, the library's probe of
// the metadata server when it is not on Google Cloud, once per process).
func connect(ctx context.Context, c *config) (*client, sdk.Diagnostics) {
	emulator := os.Getenv(emulatorEnv)
	scrub := newScrubber(c.CredentialsJSON)
	cl := &client{bucket: c.Bucket, retries: c.Retries, scrub: scrub, where: "storage.googleapis.com"}

	creds, diags := cl.findCredentials(c, emulator)
	if diags.HasErrors() {
		return nil, diags
	}

	cl.tr = newTransport(c.Timeout)
	hc, err := httptransport.NewClient(&httptransport.Options{
		BaseRoundTripper:      cl.tr,
		Credentials:           creds,
		DisableAuthentication: creds == nil,
		DisableTelemetry:      true,
	})
	if err != nil {
		return nil, append(diags, sdk.AttrError("", "cannot set up the connection", scrub.clean(err.Error()))...)
	}

	sc, err := storage.NewClient(ctx, cl.clientOptions(c, emulator, hc, creds)...)
	if err != nil {
		return nil, append(diags, sdk.AttrError("", "cannot set up the Cloud Storage client", scrub.clean(err.Error()))...)
	}
	sc.SetRetry(storage.WithPolicy(storage.RetryAlways), storage.WithBackoff(backoff()), storage.WithMaxAttempts(c.Retries+1))
	cl.sc, cl.bkt = sc, sc.Bucket(c.Bucket)
	return cl, diags
}

// findCredentials finds the credentials the client uses, nil for none, and
// says in cl.auth where they came from. emulator is the emulator's
// address, "" when none is set.
func (cl *client) findCredentials(c *config, emulator string) (*auth.Credentials, sdk.Diagnostics) {
	var diags sdk.Diagnostics
	var creds *auth.Credentials
	mode := chooseAuth(c, emulator)
	switch mode {
	case authExplicit:
		return cl.explicitCredentials(c)
	case authADC, authADCOrNone:
		found, err := credentials.DetectDefault(&credentials.DetectOptions{Scopes: scopes})
		switch {
		case err == nil:
			creds, cl.auth = found, "Application Default Credentials"
		case mode == authADC:
			return nil, sdk.AttrError("credentials_file", "no Google Cloud credentials",
				cl.scrub.clean(err.Error())+": set credentials_file (a service account key file), pass credentials_json from a sensitive variable, set GOOGLE_APPLICATION_CREDENTIALS, run `gcloud auth application-default login`, or run on Google Cloud with a service account attached")
		default:
			cl.auth = "no credentials (none were found)"
		}
	case authAnonymous:
		cl.auth = "no credentials (an http:// endpoint)"
		if c.Endpoint == "" {
			cl.auth = "no credentials (" + emulatorEnv + ")"
		}
		if attr := setCredentials(c); attr != "" {
			diags = append(diags, sdk.Diagnostic{Severity: sdk.Warning, Attribute: attr,
				Summary: "credentials not used", Detail: emulatorEnv + " is set, so requests go to the emulator at " + emulator + " without credentials; set endpoint to send them"})
		}
	}
	return creds, diags
}

// explicitCredentials reads the credentials that credentials_file or
// credentials_json gives.
func (cl *client) explicitCredentials(c *config) (*auth.Credentials, sdk.Diagnostics) {
	attr, b := "credentials_json", []byte(c.CredentialsJSON)
	if c.CredentialsFile != "" {
		attr = "credentials_file"
		var err error
		if b, err = os.ReadFile(c.CredentialsFile); err != nil {
			return nil, sdk.AttrError(attr, "cannot read the credentials file", describeFileError(err))
		}
		cl.scrub.addJSON(b)
	}
	creds, err := credentialsFromJSON(b)
	if err != nil {
		return nil, sdk.AttrError(attr, "unusable credentials", cl.scrub.clean(err.Error()))
	}
	cl.auth = "the credentials of " + attr
	return creds, nil
}

// clientOptions are the options of the Cloud Storage client that sends
// requests through hc, with creds (nil for none), to the endpoint or the
// emulator; they set where requests go and whether reads can be of
// compressed bytes.
func (cl *client) clientOptions(c *config, emulator string, hc *http.Client, creds *auth.Credentials) []option.ClientOption {
	opts := []option.ClientOption{option.WithHTTPClient(hc), storage.WithDisabledClientMetrics()}
	jsonReads := false
	switch {
	case c.Endpoint != "":
		u, _ := endpointURL(c.Endpoint) // checked
		opts = append(opts, option.WithEndpoint(u.String()))
		cl.where, jsonReads = u.Host, true
	case emulator != "":
		cl.where, jsonReads = emulator, true
	}
	cl.compressed = !jsonReads
	if jsonReads {
		// Emulators answer the JSON API everywhere, but fake-gcs-server
		// serves XML reads only when the request's Host is the one it was
		// started with (-public-host), which a mapped port or a proxy
		// changes.
		opts = append(opts, storage.WithJSONReads())
	}
	if emulator == "" {
		// Hand the library what it would otherwise look for itself.
		if creds != nil {
			opts = append(opts, option.WithAuthCredentials(creds))
		} else {
			opts = append(opts, option.WithoutAuthentication())
		}
	}
	return opts
}

// setCredentials names the credentials attribute that is set, if any.
func setCredentials(c *config) string {
	switch {
	case c.CredentialsFile != "":
		return "credentials_file"
	case c.CredentialsJSON != "":
		return "credentials_json"
	}
	return ""
}

// credentialsFromJSON builds credentials of the type the JSON declares.
func credentialsFromJSON(b []byte) (*auth.Credentials, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, errors.New("not a JSON credentials file (a service account key, say, as the Cloud console downloads it)")
	}
	t := credentials.CredType(head.Type)
	switch t {
	case credentials.ServiceAccount, credentials.AuthorizedUser, credentials.ExternalAccount,
		credentials.ImpersonatedServiceAccount, credentials.ExternalAccountAuthorizedUser, credentials.GDCHServiceAccount:
	case "":
		return nil, errors.New(`the JSON has no "type" (e.g. "service_account"): is it a credentials file?`)
	default:
		return nil, fmt.Errorf("credentials of type %q are not supported", head.Type)
	}
	creds, err := credentials.NewCredentialsFromJSON(t, b, &credentials.DetectOptions{Scopes: scopes})
	if err != nil {
		return nil, fmt.Errorf("%s credentials: %w", head.Type, err)
	}
	return creds, nil
}

func describeFileError(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return err.Error() + ": check the path (relative paths start at the working directory)"
	case errors.Is(err, os.ErrPermission):
		return err.Error() + ": pipe's user cannot read it"
	}
	return err.Error()
}

// backoff is the pause between retries: 0.5 s, doubling up to 16 s.
func backoff() gax.Backoff {
	return gax.Backoff{Initial: 500 * time.Millisecond, Max: 16 * time.Second, Multiplier: 2}
}

func (c *client) close() error {
	err := c.sc.Close()
	c.tr.CloseIdleConnections()
	return err
}

// url names an object (or the bucket, for key "") in messages.
func (c *client) url(key string) string {
	return "gs://" + c.bucket + "/" + key
}
