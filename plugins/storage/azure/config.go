package azure

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/pipebackup/pipe/plugins/sdk"
)

const (
	kib = 1 << 10
	mib = 1 << 20

	defaultBlockSize    = 64 * mib
	defaultConcurrency  = 4
	defaultSinglePut    = 16 * mib
	defaultTimeout      = 60 * time.Second
	defaultRetries      = 5
	minBlockSize        = 64 * kib
	maxBlockSize        = 4000 * mib // Put Block's limit
	maxSinglePut        = 5000 * mib // Put Blob's limit
	maxBlocks           = 50_000     // blocks in one blob
	maxConcurrency      = 256
	maxBlobName         = 1024
	configureCheckLimit = 10 * time.Second
)

// Attributes both the source and the sink declare: where the container is,
// how to authenticate, and the transfer knobs.
func commonAttributes(dir string) []sdk.Attribute {
	return []sdk.Attribute{
		{Name: "bucket", Type: sdk.String, Required: true, Description: "The container. pipe calls it bucket for every object store (s3, gcs, azure), so pipeline files look the same whichever store they use."},
		{Name: "account_url", Type: sdk.String, Description: `The Blob service endpoint: "https://ACCOUNT.blob.core.windows.net/" (the default when only account_name is set), or Azurite's "http://127.0.0.1:10000/devstoreaccount1". Not with connection_string, which holds its own.`},
		{Name: "account_name", Type: sdk.String, Description: "The storage account, for account_key. Defaults to the account in account_url (its host's first label, or for Azurite its path)."},
		{Name: "account_key", Type: sdk.String, Secret: true, Description: "A shared key of the storage account (base64, from the portal's Access keys). One of account_key, sas_token or connection_string."},
		{Name: "sas_token", Type: sdk.String, Secret: true, Description: "A shared access signature (the query string, with or without its leading ?). " + dir + " One of account_key, sas_token or connection_string."},
		{Name: "connection_string", Type: sdk.String, Secret: true, Description: "A storage connection string (AccountName, AccountKey or SharedAccessSignature, BlobEndpoint…). One of account_key, sas_token or connection_string."},
		{Name: "block_size", Type: sdk.Size, Profile: "part_size", Default: int64(defaultBlockSize), Description: "The size of each block uploaded and of each range downloaded (64KiB to 4000MiB). The profile's part_size when not set."},
		{Name: "concurrency", Type: sdk.Number, Profile: "concurrency", Default: int64(defaultConcurrency), Description: "Blocks (or ranges) in flight per object; each holds one block_size buffer. The profile's concurrency when not set."},
		{Name: "timeout", Type: sdk.Duration, Default: defaultTimeout, Description: "How long a connection may move no byte (connecting, sending, waiting for the reply, receiving) before the request is abandoned and retried. A slow transfer that moves is never cut."},
		{Name: "retries", Type: sdk.Number, Default: int64(defaultRetries), Description: "How many times a failed request (a block, a range, a commit) is retried, with exponential backoff, before the run fails."},
	}
}

// common is what the source and the sink both configure.
type common struct {
	Bucket           string        `pipe:"bucket"`
	AccountURL       string        `pipe:"account_url"`
	AccountName      string        `pipe:"account_name"`
	AccountKey       string        `pipe:"account_key"`
	SASToken         string        `pipe:"sas_token"`
	ConnectionString string        `pipe:"connection_string"`
	BlockSize        int64         `pipe:"block_size"`
	Concurrency      int64         `pipe:"concurrency"`
	Timeout          time.Duration `pipe:"timeout"`
	Retries          int64         `pipe:"retries"`
}

func defaultCommon() common {
	return common{BlockSize: defaultBlockSize, Concurrency: defaultConcurrency, Timeout: defaultTimeout, Retries: defaultRetries}
}

// check reports mistakes in the values. Diagnostics never repeat a secret.
func (c *common) check() sdk.Diagnostics {
	var d sdk.Diagnostics
	if msg := checkContainerName(c.Bucket); msg != "" {
		d = append(d, sdk.AttrError("bucket", "invalid container name", msg)...)
	}
	if c.BlockSize < minBlockSize || c.BlockSize > maxBlockSize {
		d = append(d, sdk.AttrError("block_size", "block size out of range",
			fmt.Sprintf("block_size = %s: Azure blocks are 64KiB to 4000MiB (16MiB is a good start)", sdk.FormatSize(c.BlockSize)))...)
	}
	if c.Concurrency < 1 || c.Concurrency > maxConcurrency {
		d = append(d, sdk.AttrError("concurrency", "concurrency out of range", fmt.Sprintf("concurrency = %d: use 1 to %d blocks in flight", c.Concurrency, maxConcurrency))...)
	}
	if c.Timeout < time.Second {
		d = append(d, sdk.AttrError("timeout", "timeout too short", fmt.Sprintf("timeout = %s: a connection may pause for at least a second (60s is a good start)", c.Timeout))...)
	}
	if c.Retries < 0 || c.Retries > 100 {
		d = append(d, sdk.AttrError("retries", "retries out of range", fmt.Sprintf("retries = %d: use 0 to 100", c.Retries))...)
	}
	creds := 0
	for _, s := range []string{c.AccountKey, c.SASToken, c.ConnectionString} {
		if s != "" {
			creds++
		}
	}
	switch {
	case creds == 0:
		d = append(d, sdk.AttrError("", "no credentials",
			"set account_key (with account_url or account_name), sas_token (with account_url or account_name) or connection_string; pipe has no default Azure credential chain (managed identity, az login)")...)
	case creds > 1:
		d = append(d, sdk.AttrError("", "several credentials", "set only one of account_key, sas_token and connection_string")...)
	}
	if c.ConnectionString != "" {
		if c.AccountURL != "" || c.AccountName != "" {
			d = append(d, sdk.AttrError("account_url", "account_url with connection_string", "the connection string names the endpoint and account; drop account_url and account_name")...)
		}
		if _, err := parseConnectionString(c.ConnectionString); err != nil {
			d = append(d, sdk.AttrError("connection_string", "invalid connection string", err.Error())...)
		}
		return d
	}
	if c.AccountURL == "" && c.AccountName == "" {
		d = append(d, sdk.AttrError("account_url", "no endpoint", "set account_url (e.g. https://ACCOUNT.blob.core.windows.net/) or account_name")...)
		return d
	}
	if c.AccountURL != "" {
		if msg := checkAccountURL(c.AccountURL); msg != "" {
			d = append(d, sdk.AttrError("account_url", "invalid account_url", msg)...)
			return d
		}
	}
	if c.AccountKey != "" {
		if c.accountName() == "" {
			d = append(d, sdk.AttrError("account_name", "no account name", "account_key needs the account's name: set account_name")...)
		}
		if _, err := base64.StdEncoding.DecodeString(c.AccountKey); err != nil {
			d = append(d, sdk.AttrError("account_key", "invalid account key", "an account key is base64 text (88 characters ending in ==): copy key1 or key2 from the storage account's Access keys")...)
		}
	}
	if c.SASToken != "" {
		q, err := url.ParseQuery(strings.TrimPrefix(c.SASToken, "?"))
		if err != nil || q.Get("sig") == "" {
			d = append(d, sdk.AttrError("sas_token", "invalid SAS token", "a SAS token is a query string with a signature (sv=…&sig=…), as the portal's Generate SAS shows it")...)
		}
	}
	return d
}

// checkContainerName applies Azure's rules for container names.
func checkContainerName(name string) string {
	switch name {
	case "$root", "$web", "$logs":
		return ""
	}
	if len(name) < 3 || len(name) > 63 {
		return fmt.Sprintf("%q: a container name has 3 to 63 characters", name)
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '-' && i > 0 && i < len(name)-1 && name[i-1] != '-':
		default:
			return fmt.Sprintf("%q: a container name is lowercase letters, digits and single hyphens, starting and ending with a letter or digit", name)
		}
	}
	return ""
}

// checkAccountURL: an http(s) URL without a query string (a SAS in it would
// be printed in plans; it belongs in sas_token) or user information.
func checkAccountURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a URL; write it as https://ACCOUNT.blob.core.windows.net/"
	case u.RawQuery != "" || strings.Contains(s, "?"):
		return "it has a query string; a SAS token goes in sas_token, which pipe keeps secret"
	case u.User != nil:
		return "it holds user information; credentials go in account_key, sas_token or connection_string"
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Sprintf("scheme %q; use https:// (or http:// for Azurite)", u.Scheme)
	case u.Host == "":
		return "no host; write it as https://ACCOUNT.blob.core.windows.net/"
	}
	return ""
}

// accountName is account_name, or the account account_url names.
func (c *common) accountName() string {
	if c.AccountName != "" {
		return c.AccountName
	}
	u, err := url.Parse(c.AccountURL)
	if err != nil {
		return ""
	}
	host := u.Hostname()
	if net.ParseIP(host) == nil && host != "localhost" && strings.Contains(host, ".") {
		return strings.Split(host, ".")[0] // ACCOUNT.blob.core.windows.net
	}
	// Emulator style: http://127.0.0.1:10000/ACCOUNT
	first, _, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	return first
}

func (c *common) serviceURL() string {
	if c.AccountURL != "" {
		return strings.TrimSuffix(c.AccountURL, "/")
	}
	return "https://" + c.AccountName + ".blob.core.windows.net"
}

// parseConnectionString checks a connection string's shape and returns
// its pairs. Its errors never repeat the string.
func parseConnectionString(cs string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(strings.TrimRight(strings.TrimSpace(cs), ";"), ";") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, errors.New("a connection string is Key=Value pairs separated by ; (DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…;EndpointSuffix=core.windows.net), as the portal's Access keys show it")
		}
		out[strings.TrimSpace(k)] = v
	}
	if out["BlobEndpoint"] == "" && out["AccountName"] == "" {
		return nil, errors.New("the connection string names neither AccountName nor BlobEndpoint")
	}
	if out["AccountKey"] == "" && out["SharedAccessSignature"] == "" {
		return nil, errors.New("the connection string holds neither AccountKey nor SharedAccessSignature")
	}
	if k := out["AccountKey"]; k != "" {
		if _, err := base64.StdEncoding.DecodeString(k); err != nil {
			return nil, errors.New("the connection string's AccountKey is not base64: copy the connection string again from the storage account's Access keys")
		}
	}
	return out, nil
}

// client is a container with what errors need to say where they happened.
type client struct {
	c         *container.Client
	where     string // the container's URL, without any query string
	bucket    string
	blockSize int64
	conc      int
	retries   int
}

// connect builds the container client. Its errors never hold a secret.
func (c *common) connect() (*client, error) {
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: newHTTPClient(int(c.Concurrency), c.Timeout),
		Retry: policy.RetryOptions{
			MaxRetries:    int32(c.Retries),
			RetryDelay:    time.Second,
			MaxRetryDelay: 30 * time.Second,
			ShouldRetry:   shouldRetry,
		},
		Telemetry: policy.TelemetryOptions{ApplicationID: "pipe"},
	}}
	if c.Retries == 0 {
		opts.Retry.MaxRetries = -1 // azcore: 0 means its default (3)
	}
	var cc *container.Client
	var err error
	switch {
	case c.ConnectionString != "":
		cc, err = container.NewClientFromConnectionString(c.ConnectionString, c.Bucket, opts)
		if err != nil {
			return nil, errors.New("the connection string was refused by the Azure SDK: copy it again from the storage account's Access keys")
		}
	case c.AccountKey != "":
		cred, kerr := container.NewSharedKeyCredential(c.accountName(), c.AccountKey)
		if kerr != nil {
			return nil, errors.New("account_key is not a valid account key")
		}
		cc, err = container.NewClientWithSharedKeyCredential(c.serviceURL()+"/"+c.Bucket, cred, opts)
	default:
		cc, err = container.NewClientWithNoCredential(c.serviceURL()+"/"+c.Bucket+"?"+strings.TrimPrefix(c.SASToken, "?"), opts)
	}
	if err != nil {
		return nil, fmt.Errorf("making the Azure client: %s", redact(err.Error()))
	}
	return &client{c: cc, where: stripQuery(cc.URL()), bucket: c.Bucket, blockSize: c.BlockSize, conc: int(c.Concurrency), retries: int(c.Retries)}, nil
}

// shouldRetry is azcore's rule (transport errors, 408, 429, 5xx) plus a
// block or put whose checksum the service found damaged on the way.
func shouldRetry(resp *http.Response, err error) bool {
	if err != nil {
		return true // azcore has already ruled out cancellation
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusBadRequest:
		code := resp.Header.Get("x-ms-error-code")
		return code == string(bloberror.MD5Mismatch) || code == string(bloberror.CRC64Mismatch)
	}
	return false
}

// decode decodes cfg over the defaults into dst (a struct embedding
// common, with the endpoint's own fields; Decode fills embedded structs)
// and checks the common part.
func decode(cfg sdk.Config, dst any, c *common) sdk.Diagnostics {
	if err := cfg.Decode(dst); err != nil {
		return sdk.AttrError("", "invalid configuration", err.Error())
	}
	return c.check()
}

// probe checks, before any byte moves, that the container exists and the
// credentials are accepted. Only answers that are certain become
// diagnostics: a SAS or role that may write but not read the container's
// properties, or a network that is slow to answer, is left to the
// operations themselves.
//
// With locks, the container must support version-level immutability:
// else every commit would be refused after its blocks were sent.
func (cl *client) probe(ctx context.Context, locks bool) sdk.Diagnostics {
	ctx, cancel := context.WithTimeout(ctx, configureCheckLimit)
	defer cancel()
	props, err := cl.c.GetProperties(ctx, nil)
	switch {
	case err == nil && locks && (props.IsImmutableStorageWithVersioningEnabled == nil || !*props.IsImmutableStorageWithVersioningEnabled):
		return sdk.AttrError("object_lock_days", "the container cannot lock blobs",
			fmt.Sprintf("%s does not have version-level immutability support, which object_lock_days needs: create the container with it (az storage container-rm create --enable-vlw), or leave object_lock_days out", cl.where))
	case err == nil:
		return nil
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return sdk.AttrError("bucket", "no such container", cl.explain("checking", cl.where, err).Error())
	case bloberror.HasCode(err, bloberror.AuthenticationFailed, bloberror.InvalidAuthenticationInfo):
		return sdk.AttrError("", "credentials refused", cl.explain("checking", cl.where, err).Error())
	}
	return nil
}
