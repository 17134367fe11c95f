package gcs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/bulkhttp"
)

// scrubber removes credentials from error text: the whole credentials
// JSON, and every value in it that could be secret (a private key, a
// refresh token, a client secret), which a library error might quote on
// its own. The host scrubs secret attributes' values too, but only whole
// values, and only across the plugin boundary.
type scrubber struct {
	secrets []string
}

// publicFields are credentials fields that are not secret and that make
// errors useful (which account was refused, which token endpoint failed).
// A query string in them still counts as secret.
var publicFields = map[string]bool{"type": true, "client_email": true, "project_id": true, "universe_domain": true,
	"quota_project_id": true, "token_uri": true, "auth_uri": true, "auth_provider_x509_cert_url": true,
	"client_x509_cert_url": true, "token_url": true, "service_account_impersonation_url": true, "audience": true,
	"subject_token_type": true}

func newScrubber(credentialsJSON string) *scrubber {
	s := &scrubber{}
	if strings.TrimSpace(credentialsJSON) != "" {
		s.add(credentialsJSON)
		s.addJSON([]byte(credentialsJSON))
	}
	return s
}

func (s *scrubber) add(v string) {
	if len(strings.TrimSpace(v)) >= 6 {
		s.secrets = append(s.secrets, v)
		// Longest first, so a value is removed before any part of it.
		sort.Slice(s.secrets, func(i, j int) bool { return len(s.secrets[i]) > len(s.secrets[j]) })
	}
}

// addJSON adds every string in a credentials JSON except public fields;
// a private key also goes in line by line, as errors may quote a line.
func (s *scrubber) addJSON(b []byte) {
	var v any
	if json.Unmarshal(b, &v) != nil {
		s.add(string(b))
		return
	}
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(k, e)
			}
		case []any:
			for _, e := range x {
				walk(key, e)
			}
		case string:
			if publicFields[key] {
				if i := strings.IndexByte(x, '?'); i >= 0 {
					s.add(x[i+1:])
				}
				return
			}
			s.add(x)
			for _, line := range strings.Split(x, "\n") {
				if !strings.HasPrefix(line, "-----") {
					s.add(line)
				}
			}
		}
	}
	walk("", v)
}

// queryRE matches a URL's query string: upload session ids and signed
// parameters are capabilities, not for logs.
var queryRE = regexp.MustCompile(`(https?://[^\s"'?]+)\?[^\s"']*`)

func (s *scrubber) clean(msg string) string {
	msg = sdk.Scrub(msg, s.secrets...)
	msg = queryRE.ReplaceAllString(msg, "$1?…")
	// One line: library errors quote response bodies with their breaks.
	return strings.Join(strings.Fields(msg), " ")
}

// opError is what every failed operation returns: what failed, on which
// object, why and what to do. It unwraps to a sentinel (sdk.ErrNotFound,
// a context error) and to the library's error, but its text is the
// scrubbed one.
type opError struct {
	msg      string
	sentinel error
	err      error
}

func (e *opError) Error() string   { return e.msg }
func (e *opError) Unwrap() []error { return []error{e.sentinel, e.err} }

// explain turns a library error from op (e.g. "uploading") on key (""
// for the bucket itself) into an opError.
func (c *client) explain(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var already *opError
	if errors.As(err, &already) {
		return err
	}
	where := c.url(key)
	if key == "" {
		where = "gs://" + c.bucket
	}
	why, hint, sentinel := c.describe(err, key)
	msg := fmt.Sprintf("%s %s: %s", op, where, c.scrub.clean(why))
	if hint != "" {
		msg += ": " + hint
	}
	return &opError{msg: msg, sentinel: sentinel, err: err}
}

// describe says why err happened and what to do about it.
func (c *client) describe(err error, key string) (why, hint string, sentinel error) {
	var gerr *googleapi.Error
	var aerr *auth.Error
	var serr *bulkhttp.StallError
	var nerr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled", "", context.Canceled
	case errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &serr):
		return "timed out", "", context.DeadlineExceeded
	case errors.Is(err, storage.ErrObjectNotExist):
		return "no such object", "", sdk.ErrNotFound
	case errors.Is(err, storage.ErrBucketNotExist):
		return "the bucket does not exist", fmt.Sprintf("check bucket = %q (create it with `gcloud storage buckets create gs://%s`)", c.bucket, c.bucket), sdk.ErrNotFound
	case errors.Is(err, errChanged):
		return err.Error(), "another writer replaced it during the read, or the bytes were damaged in transit; run again", nil
	case errors.As(err, &serr):
		return serr.Error(), fmt.Sprintf("%s stalled after %d retries: check the network and the endpoint, or raise timeout for a slow link", c.where, c.retries), nil
	case errors.As(err, &aerr):
		return "getting an access token failed: " + err.Error(), "check the credentials (" + c.auth + ")", nil
	case errors.As(err, &gerr):
		return describeHTTP(c, gerr, key)
	case isDialError(err):
		return err.Error(), fmt.Sprintf("cannot reach %s: check endpoint (or %s) and the network", c.where, emulatorEnv), nil
	case errors.As(err, &nerr):
		return err.Error(), fmt.Sprintf("the connection to %s failed %d times in a row: check the network, then run again", c.where, c.retries+1), nil
	}
	return err.Error(), "", nil
}

func describeHTTP(c *client, e *googleapi.Error, key string) (why, hint string, sentinel error) {
	why = fmt.Sprintf("HTTP %d", e.Code)
	if e.Message != "" {
		why += ": " + e.Message
	} else if t := http.StatusText(e.Code); t != "" {
		why += " " + t
	}
	switch {
	case e.Code == http.StatusUnauthorized:
		hint = "the credentials were refused (" + c.auth + "): check credentials_file or credentials_json, or renew the Application Default Credentials (`gcloud auth application-default login`)"
	case e.Code == http.StatusForbidden:
		hint = fmt.Sprintf("the account (%s) lacks a permission on gs://%s: grant it roles/storage.objectUser there (or objectCreator to back up, objectViewer to restore; retention also deletes)", c.auth, c.bucket)
	case e.Code == http.StatusNotFound && key == "":
		hint = fmt.Sprintf("check bucket = %q", c.bucket)
		sentinel = sdk.ErrNotFound
	case e.Code == http.StatusNotFound:
		sentinel = sdk.ErrNotFound
	case e.Code == http.StatusPreconditionFailed:
		hint = "the object changed while pipe was working on it: another writer uses the same key; run again, or give each run its own keys (${run.id})"
	case e.Code == http.StatusBadRequest && strings.Contains(strings.ToLower(e.Message), "retention"):
		hint = "object_lock_days needs a bucket with object retention enabled (gcloud storage buckets create --enable-per-object-retention); nothing was stored"
	case e.Code == http.StatusBadRequest:
		hint = "the request was refused as invalid; if an object name is at fault, check the sink's key"
	case e.Code == http.StatusTooManyRequests:
		hint = fmt.Sprintf("rate limited after %d retries: run fewer streams at once, or try again later", c.retries)
	case e.Code >= 500:
		hint = fmt.Sprintf("the service kept failing after %d retries: try again later", c.retries)
	}
	return why, hint, sentinel
}

func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// retriable reports whether a failed read of a range may succeed when
// tried again.
func retriable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, storage.ErrObjectNotExist) || errors.Is(err, storage.ErrBucketNotExist) || errors.Is(err, sdk.ErrNotFound) || errors.Is(err, errChanged) {
		return false
	}
	var aerr *auth.Error
	if errors.As(err, &aerr) {
		return aerr.Temporary()
	}
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		return gerr.Code == 408 || gerr.Code == 429 || gerr.Code >= 500
	}
	return true
}
