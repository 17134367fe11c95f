package s3

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/ranged"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30

	// S3's limits on multipart uploads.
	minPartSize = 5 * mib
	maxPartSize = 5 * gib
	maxParts    = 10000
	maxObject   = 5 * 1024 * gib

	// minRangeSize is the smallest ranged GET a restore issues.
	minRangeSize = 1 * mib

	defaultPartSize    = 64 * mib // the balanced profile's
	defaultConcurrency = 4
	defaultBufferSize  = 256 * kib
)

// connAttrs are the attributes of the connection to the store, the same
// for the source and the sink.
func connAttrs() []sdk.Attribute {
	return []sdk.Attribute{
		{Name: "bucket", Type: sdk.String, Required: true, Description: "The bucket's name."},
		{Name: "endpoint", Type: sdk.String, Default: "", Description: `The store's URL for S3-compatible stores (MinIO, Ceph, R2), e.g. "http://127.0.0.1:9000"; empty for AWS (or AWS_ENDPOINT_URL).`},
		{Name: "region", Type: sdk.String, Default: "", Description: `The bucket's region, e.g. "eu-west-1"; empty takes AWS_REGION or the shared config's, and "us-east-1" for a store at an endpoint.`},
		{Name: "path_style", Type: sdk.Bool, Default: false, Description: "Address the bucket as endpoint/bucket/key instead of bucket.endpoint/key: most S3-compatible stores need it."},
		{Name: "access_key_id", Type: sdk.String, Default: "", Secret: true, Description: "The access key ID; empty uses the AWS SDK's standard chain (AWS_ACCESS_KEY_ID, AWS_PROFILE and ~/.aws, web identity, an EC2 or ECS role)."},
		{Name: "secret_access_key", Type: sdk.String, Default: "", Secret: true, Description: "The secret access key that goes with access_key_id. Pass it from a sensitive variable, never write it in the file."},
		{Name: "session_token", Type: sdk.String, Default: "", Secret: true, Description: "The session token of temporary credentials, with access_key_id and secret_access_key."},
		{Name: "connections", Type: sdk.Number, Default: int64(0), Description: "Idle connections kept open to the store for reuse; 0 sizes the pool from concurrency (16 × concurrency, at least 64), so parallel parts of parallel streams do not wait for new connections (Go's default keeps 2)."},
		{Name: "read_buffer_size", Type: sdk.Size, Default: defaultBufferSize, Description: "The read buffer of each connection (Go's default is 4 KiB)."},
		{Name: "write_buffer_size", Type: sdk.Size, Default: defaultBufferSize, Description: "The write buffer of each connection (Go's default is 4 KiB)."},
		{Name: "connect_timeout", Type: sdk.Duration, Default: 10 * time.Second, Description: "How long connecting (TCP and TLS) may take."},
		{Name: "timeout", Type: sdk.Duration, Default: 30 * time.Second, Description: "How long a connection may move no byte in either direction while a request is in flight before it is dropped and the request retried; 0 waits forever."},
		{Name: "retries", Type: sdk.Number, Default: int64(8), Description: "How many times a failed request (or a range of a restore that broke off) is retried, with exponential backoff, before the run fails."},
		versionedAttr,
	}
}

// withConn returns the attributes of an endpoint: bucket, its own, then
// the rest of the connection's.
func withConn(own []sdk.Attribute) []sdk.Attribute {
	conn := connAttrs()
	out := append([]sdk.Attribute{conn[0]}, own...)
	return append(out, conn[1:]...)
}

// connConfig is what connAttrs decode to.
type connConfig struct {
	Bucket         string        `pipe:"bucket"`
	Endpoint       string        `pipe:"endpoint"`
	Region         string        `pipe:"region"`
	PathStyle      bool          `pipe:"path_style"`
	AccessKeyID    string        `pipe:"access_key_id"`
	SecretKey      string        `pipe:"secret_access_key"`
	SessionToken   string        `pipe:"session_token"`
	PartSize       int64         `pipe:"part_size"`
	Concurrency    int           `pipe:"concurrency"`
	Connections    int           `pipe:"connections"`
	ReadBuffer     int64         `pipe:"read_buffer_size"`
	WriteBuffer    int64         `pipe:"write_buffer_size"`
	ConnectTimeout time.Duration `pipe:"connect_timeout"`
	Timeout        time.Duration `pipe:"timeout"`
	Retries        int           `pipe:"retries"`
	Versioned      bool          `pipe:"versioned"`
}

// defaults fills what the host left out (tests and embedders call
// Configure with partial configs; pipe always sends every attribute).
func (c *connConfig) defaults() {
	if c.PartSize == 0 {
		c.PartSize = defaultPartSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = defaultConcurrency
	}
	if c.ReadBuffer == 0 {
		c.ReadBuffer = defaultBufferSize
	}
	if c.WriteBuffer == 0 {
		c.WriteBuffer = defaultBufferSize
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
}

// decodeConn decodes cfg into c (which may embed more fields) and checks
// the connection settings.
func decodeConn(cfg sdk.Config, dst any, c *connConfig, minPart int64) sdk.Diagnostics {
	c.Retries = -1
	if err := cfg.Decode(dst); err != nil {
		return sdk.AttrError("", "invalid configuration", err.Error())
	}
	if err := cfg.Decode(c); err != nil {
		return sdk.AttrError("", "invalid configuration", err.Error())
	}
	if c.Retries < 0 {
		c.Retries = 8
	}
	c.defaults()
	var d sdk.Diagnostics
	if c.Bucket == "" {
		d = append(d, sdk.AttrError("bucket", "bucket is empty", "name the bucket to use")...)
	} else if strings.ContainsAny(c.Bucket, "/ ") {
		d = append(d, sdk.AttrError("bucket", "invalid bucket name", fmt.Sprintf("%q is not a bucket name: put folders in the key or prefix, not in bucket", c.Bucket))...)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
			d = append(d, sdk.AttrError("endpoint", "invalid endpoint", fmt.Sprintf("%q is not a URL: write the scheme, host and port, e.g. \"http://127.0.0.1:9000\" or \"https://s3.example.com\"", c.Endpoint))...)
		case u.User != nil:
			d = append(d, sdk.AttrError("endpoint", "credentials in the endpoint", "the endpoint URL holds a user name or password: put them in access_key_id and secret_access_key instead")...)
		}
	}
	if (c.AccessKeyID == "") != (c.SecretKey == "") {
		attr := "secret_access_key"
		if c.AccessKeyID == "" {
			attr = "access_key_id"
		}
		d = append(d, sdk.AttrError(attr, "incomplete credentials", "set both access_key_id and secret_access_key, or neither to use the AWS SDK's standard chain")...)
	}
	if c.SessionToken != "" && c.AccessKeyID == "" {
		d = append(d, sdk.AttrError("session_token", "incomplete credentials", "a session token needs access_key_id and secret_access_key")...)
	}
	if c.PartSize < minPart || c.PartSize > maxPartSize {
		d = append(d, sdk.AttrError("part_size", "invalid part size", fmt.Sprintf("%s is out of range: use between %s and %s", sdk.FormatSize(c.PartSize), sdk.FormatSize(minPart), sdk.FormatSize(maxPartSize)))...)
	}
	if c.Concurrency < 1 || c.Concurrency > 1024 {
		d = append(d, sdk.AttrError("concurrency", "invalid concurrency", fmt.Sprintf("%d: use between 1 and 1024 parts in flight", c.Concurrency))...)
	}
	if c.Connections < 0 {
		d = append(d, sdk.AttrError("connections", "invalid connections", "use 0 (automatic) or more")...)
	}
	for _, b := range []struct {
		attr string
		n    int64
	}{{"read_buffer_size", c.ReadBuffer}, {"write_buffer_size", c.WriteBuffer}} {
		if b.n < 4*kib || b.n > 64*mib {
			d = append(d, sdk.AttrError(b.attr, "invalid buffer size", fmt.Sprintf("%s is out of range: use between 4KiB and 64MiB", sdk.FormatSize(b.n)))...)
		}
	}
	if c.ConnectTimeout < 0 {
		d = append(d, sdk.AttrError("connect_timeout", "invalid timeout", "the timeout is negative")...)
	}
	if c.Timeout < 0 {
		d = append(d, sdk.AttrError("timeout", "invalid timeout", "the timeout is negative; 0 waits forever")...)
	}
	if c.Retries > 100 {
		d = append(d, sdk.AttrError("retries", "invalid retries", fmt.Sprintf("%d: use between 0 and 100", c.Retries))...)
	}
	return d
}

// store is a configured connection to one bucket.
type store struct {
	client   *s3.Client
	bucket   string
	endpoint string // for messages: the URL, or "AWS"
	signed   bool   // plain HTTP: SigV4 signs every request's payload SHA-256
	region   string
	cfg      connConfig
	versions versions // in a versioned store: what each key stands for
}

// newStore builds the client. It does no network I/O: credentials are
// resolved at the first request, so a mistake shows there, with its key.
func newStore(ctx context.Context, c connConfig) (*store, sdk.Diagnostics) {
	opts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return loggedRetryer{retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = c.Retries + 1
				o.MaxBackoff = 10 * time.Second
				// Parts fail together when the network does: a shared retry
				// budget would fail the run after a few resets.
				o.RateLimiter = ratelimit.None
			})}
		}),
		config.WithLogger(logging.Nop{}),
		config.WithClientLogMode(0),
		// The sink computes its checksums itself and sends them as headers
		// (see checksum.go); the SDK adds none of its own (no aws-chunked
		// trailers, which many S3-compatible stores reject). Restores are
		// verified against the manifest's SHA-256.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	if c.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretKey, c.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		// The shared config files are broken; say so without their contents.
		return nil, sdk.AttrError("", "cannot load the AWS configuration", fmt.Sprintf("%v: fix ~/.aws/config or AWS_CONFIG_FILE, or set the credentials in the block", err))
	}
	st := &store{bucket: c.Bucket, cfg: c, endpoint: "AWS"}
	endpoint := c.Endpoint
	if endpoint == "" && awsCfg.BaseEndpoint != nil {
		endpoint = *awsCfg.BaseEndpoint
	}
	if endpoint != "" {
		st.endpoint = endpoint
		st.signed = strings.HasPrefix(strings.ToLower(endpoint), "http://")
	}
	// The S3 client gets a transport of its own (a plain *http.Client,
	// which the SDK leaves alone), trusting what the SDK was told to trust
	// (AWS_CA_BUNDLE, ca_bundle in the shared config). Building the SDK's
	// transport parses the whole bundle (4-9 ms of a 16 MiB upload's run
	// here, for a 220 KB bundle), so it is skipped when nothing can check
	// a certificate with it: the block's own endpoint (which the client
	// uses whatever the environment says) is plain HTTP, reached without a
	// proxy. (An http:// endpoint that redirects to https:// would then
	// be checked against the system's roots only.)
	tr := newTransport(c)
	if b, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient); ok && !plainHTTP(c.Endpoint) {
		if tls := b.GetTransport().TLSClientConfig; tls != nil && tls.RootCAs != nil {
			tr.TLSClientConfig.RootCAs = tls.RootCAs
		}
	}
	awsCfg.HTTPClient = &http.Client{Transport: tr}
	if awsCfg.Region == "" {
		if endpoint == "" {
			return nil, sdk.AttrError("region", "no region", `set region to the bucket's AWS region (e.g. "eu-west-1"), or AWS_REGION`)
		}
		awsCfg.Region = "us-east-1" // what S3-compatible stores expect unless told otherwise
	}
	st.region = awsCfg.Region
	st.client = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	return st, nil
}

// plainHTTP says whether endpoint is an http:// URL that the transport
// reaches directly (no proxy from the environment applies to it).
func plainHTTP(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || !strings.EqualFold(u.Scheme, "http") || u.Host == "" {
		return false
	}
	proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u})
	return err == nil && proxy == nil
}

// url names an object for messages.
func (s *store) url(key string) string { return "s3://" + s.bucket + "/" + key }

// memory is what one object in flight buffers: its parts (or ranges) and
// the buffers of the connections that move them.
func memory(c connConfig, streams int) int64 {
	c.defaults()
	perObject := int64(c.Concurrency) * (c.PartSize + c.ReadBuffer + c.WriteBuffer)
	return int64(max(streams, 1))*perObject + 2*mib
}

// smallMemory is memory for objects of at most maxObject bytes. One that
// fits a part is one buffer of its size (a single PutObject; a read of
// one range) on one connection; a larger one is counted as any object,
// for the sink, and as the ranges it has, for the source.
func smallMemory(c connConfig, streams int, maxObject int64, sink bool) int64 {
	c.defaults()
	if maxObject > c.PartSize && sink {
		return memory(c, streams)
	}
	conns := min((maxObject+c.PartSize-1)/c.PartSize, int64(c.Concurrency))
	perObject := ranged.Memory(c.PartSize, c.Concurrency, maxObject) + conns*(c.ReadBuffer+c.WriteBuffer)
	return int64(max(streams, 1))*perObject + 2*mib
}

// loggedRetryer logs every retry the SDK makes (pipe counts them in
// pipe_retries_total).
type loggedRetryer struct{ aws.RetryerV2 }

func (r loggedRetryer) RetryDelay(attempt int, err error) (time.Duration, error) {
	d, derr := r.RetryerV2.RetryDelay(attempt, err)
	if derr == nil {
		sdk.Log().Warn("an S3 request failed; retrying", "event", "retry", "endpoint", "s3", "attempt", attempt, "delay", d.String(), "error", err.Error())
	}
	return d, derr
}
