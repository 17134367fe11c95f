package s3

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"syscall"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// opError is a failed operation on an object, worded for the user: what
// failed, where, and what to do. It unwraps to the SDK's error (and to
// sdk.ErrNotFound for a missing object) so callers can still tell
// cancellation and absence apart.
type opError struct {
	msg      string
	err      error
	notFound bool
}

func (e *opError) Error() string { return e.msg }

func (e *opError) Unwrap() []error {
	if e.notFound {
		return []error{e.err, sdk.ErrNotFound}
	}
	return []error{e.err}
}

// fail describes err, which happened while doing op (e.g. "uploading part
// 3 of") on the object at key ("" for the bucket itself).
func (s *store) fail(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var prev *opError
	if errors.As(err, &prev) {
		return err // described already
	}
	where := "s3://" + s.bucket + "/" + key
	if key == "" {
		where = "bucket " + s.bucket
	}
	why, notFound := s.explain(err)
	return &opError{msg: fmt.Sprintf("%s %s: %s", op, where, why), err: err, notFound: notFound}
}

var expectingRegion = regexp.MustCompile(`expecting '([a-z0-9-]+)'`)

// explain turns an error of the SDK or the network into what happened and
// what to do. It never quotes request headers (they carry the signature).
func (s *store) explain(err error) (why string, notFound bool) {
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled", false
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out", false
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		return s.explainAPI(err, api)
	}
	return s.explainTransport(err), false
}

// explainAPI explains err, in which the store answered with api.
func (s *store) explainAPI(err error, api smithy.APIError) (why string, notFound bool) {
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	code, msg := api.ErrorCode(), strings.TrimSuffix(api.ErrorMessage(), ".")
	detail := code
	if msg != "" {
		detail += " (" + msg + ")"
	}
	if advice, nf := s.adviceFor(code, msg, detail, re); advice != "" {
		return advice, nf
	}
	if status == 403 {
		return fmt.Sprintf("access denied (%s): check the credentials and the permissions on the bucket", detail), false
	}
	if status == 404 {
		return detail, true
	}
	return detail, false
}

// adviceFor is what an error code of the store means and what to do
// about it, "" for a code it has no advice for. detail is the code with
// the store's message msg.
func (s *store) adviceFor(code, msg, detail string, re *awshttp.ResponseError) (why string, notFound bool) {
	switch code {
	case "NoSuchBucket":
		return fmt.Sprintf("bucket %q does not exist at %s: create it or fix bucket", s.bucket, s.endpoint), false
	case "NoSuchKey", "NotFound":
		return "no such object", true
	case "AccessDenied", "Forbidden", "AllAccessDisabled", "AccountProblem":
		return fmt.Sprintf("access denied (%s): the credentials in use may not do this here: check access_key_id and secret_access_key (or the AWS SDK's chain: AWS_ACCESS_KEY_ID, AWS_PROFILE, the instance role), the bucket policy and the permissions (s3:PutObject, s3:GetObject, s3:ListBucket, s3:DeleteObject, s3:AbortMultipartUpload)", code), false
	case "InvalidAccessKeyId":
		return fmt.Sprintf("the store at %s does not know this access key (InvalidAccessKeyId): check access_key_id, and that endpoint points at the store the key belongs to", s.endpoint), false
	case "SignatureDoesNotMatch":
		return "the request signature does not match (SignatureDoesNotMatch): check secret_access_key (and region)", false
	case "AuthorizationHeaderMalformed", "AuthorizationQueryParametersError":
		return s.regionAdvice(msg, detail), false
	case "PermanentRedirect", "MovedPermanently", "301":
		return s.redirectAdvice(re, detail), false
	case "InvalidBucketName":
		return fmt.Sprintf("%q is not a valid bucket name: fix bucket", s.bucket), false
	case "ExpiredToken", "TokenRefreshRequired", "InvalidToken":
		return fmt.Sprintf("the credentials are expired or invalid (%s): renew the session token or the credentials", code), false
	case "RequestTimeTooSkewed":
		return "this machine's clock is too far off the store's (RequestTimeTooSkewed): synchronise it (NTP)", false
	case "NoSuchUpload":
		return "the multipart upload is gone (NoSuchUpload): something else aborted it, e.g. a lifecycle rule with a very short AbortIncompleteMultipartUpload", false
	case "BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch":
		return fmt.Sprintf("the store received other bytes than were sent (%s): the data was damaged on the way; run again, and check the network or proxy in between", detail), false
	case "SlowDown", "ServiceUnavailable", "RequestLimitExceeded", "XMinioServerNotInitialized":
		return fmt.Sprintf("the store is throttling or unavailable (%s) after every retry: lower concurrency or streams, or raise retries", detail), false
	case "InvalidStorageClass":
		return fmt.Sprintf("the store rejects the storage class (%s): fix storage_class", detail), false
	case "QuotaExceeded", "XMinioStorageFull", "StorageFull":
		return fmt.Sprintf("the store is full (%s): free space or raise its quota", detail), false
	case "PreconditionFailed":
		return "the object changed while it was being read: run the restore again (and do not write the backup while restoring it)", false
	case "InvalidRange":
		return "the object is shorter than expected (InvalidRange): it changed while being read", false
	case "NotImplemented", "InvalidRequest", "InvalidArgument", "UnsupportedChecksum":
		if lockMissing(msg) {
			return fmt.Sprintf("the store refuses to lock the object (%s): object_lock_days needs a bucket created with object lock (aws s3api create-bucket --object-lock-enabled-for-bucket, mc mb --with-lock); nothing was stored", detail), false
		}
		return checksumAdvice(msg, detail), false
	}
	return "", false
}

// regionAdvice explains a malformed authorization, usually a wrong
// region, which the store's message msg may name.
func (s *store) regionAdvice(msg, detail string) string {
	if m := expectingRegion.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("wrong region %q: the bucket is in %q: set region = %q", s.region, m[1], m[1])
	}
	return fmt.Sprintf("%s: check region (now %q) and the credentials", detail, s.region)
}

// redirectAdvice explains a redirect: the bucket is elsewhere, in the
// region re may name.
func (s *store) redirectAdvice(re *awshttp.ResponseError, detail string) string {
	if r := bucketRegion(re); r != "" {
		return fmt.Sprintf("the bucket is in region %q, not %q: set region = %q", r, s.region, r)
	}
	return fmt.Sprintf("the bucket is not at this endpoint or region (%s): check region (now %q) and endpoint", detail, s.region)
}

// checksumAdvice explains a request the store refuses because of its
// checksum, if its message msg says so; "" otherwise.
func checksumAdvice(msg, detail string) string {
	if strings.Contains(strings.ToLower(msg), "checksum") || strings.Contains(strings.ToLower(msg), "x-amz-") {
		return fmt.Sprintf("the store does not accept this request (%s): it may not support the checksum algorithm: set checksum = \"sha256\" or \"none\" for this store", detail)
	}
	return ""
}

// explainTransport explains an error that is not the store's answer: the
// network, TLS, the credentials chain.
func (s *store) explainTransport(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		hint := "check endpoint"
		if strings.HasPrefix(dns.Name, s.bucket+".") {
			hint = "the store may not serve buckets as host names: set path_style = true, or check endpoint"
		}
		return fmt.Sprintf("cannot resolve %s: %s", dns.Name, hint)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Sprintf("connection refused at %s: check endpoint (scheme, host and port) and that the store is running", s.endpoint)
	}
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	if errors.As(err, &ua) || errors.As(err, &hn) {
		return fmt.Sprintf("the TLS certificate of %s is not trusted (%v): check endpoint, or install the CA", s.endpoint, err)
	}
	text := err.Error()
	switch {
	case strings.Contains(text, "server gave HTTP response to HTTPS client"):
		return fmt.Sprintf("%s speaks plain HTTP: write the endpoint as http://…", s.endpoint)
	case strings.Contains(text, "get credentials") || strings.Contains(text, "failed to refresh cached credentials") || strings.Contains(text, "static credentials are empty") || strings.Contains(text, "get identity"):
		return "no credentials: set access_key_id and secret_access_key (from sensitive variables), or provide them the AWS way (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance or task role)"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Sprintf("no byte moved for timeout (%s) on every attempt: the network or the store at %s stalled; check them, or raise timeout", s.cfg.Timeout, s.endpoint)
	}
	if isBroken(err) {
		return fmt.Sprintf("the connection to %s broke on every attempt (%v): check the network, or raise retries", s.endpoint, last(err))
	}
	return text
}

// bucketRegion is the region S3 names in a redirect.
func bucketRegion(re *awshttp.ResponseError) string {
	if re == nil || re.Response == nil {
		return ""
	}
	return re.Response.Header.Get("X-Amz-Bucket-Region")
}

// isBroken reports a connection that broke mid-request.
func isBroken(err error) bool {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	t := err.Error()
	return strings.Contains(t, "connection reset") || strings.Contains(t, "broken pipe") ||
		strings.Contains(t, "unexpected EOF") || strings.HasSuffix(t, ": EOF") || strings.Contains(t, "use of closed network connection")
}

// last is the innermost error's text, without the SDK's wrapping.
func last(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}
