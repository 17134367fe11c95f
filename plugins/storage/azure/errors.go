package azure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// opError is an error with a message of its own: what failed, where, and
// what to do. It unwraps to the cause (so errors.Is finds context.Canceled,
// sdk.ErrNotFound, …) without printing the cause's long text, which for a
// service error spans many lines and for a transport error holds the
// request's URL, SAS signature included.
type opError struct {
	msg   string
	cause error
}

func (e *opError) Error() string { return e.msg }
func (e *opError) Unwrap() error { return e.cause }

// explain turns err from operation op on the object at where (a URL without
// its query string) into an error that says what to do.
func explain(op, where string, err error) error {
	if err == nil {
		return nil
	}
	var oe *opError
	if errors.As(err, &oe) {
		return err // already explained
	}
	msg := fmt.Sprintf("%s %s: %s", op, where, describe(err))
	var cause = err
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		// A stalled connection (the transport's timeouts match
		// context.DeadlineExceeded too): a failure of the network, not a
		// deadline of the caller's, which pipe would take for one.
		cause = errors.New(msg)
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) && (re.StatusCode == http.StatusNotFound) && !bloberror.HasCode(err, bloberror.ContainerNotFound) {
		cause = errors.Join(err, sdk.ErrNotFound)
	}
	return &opError{msg: msg, cause: cause}
}

// describe says what err means and what to do about it, without secrets.
func describe(err error) string {
	var re *azcore.ResponseError
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.As(err, &re):
		return describeResponse(re)
	}
	// The stall timeout of a connection, the transport's wait for an
	// answer (both are timeout) and a deadline on the operation all land
	// here; only the probe before a run sets such a deadline.
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return "timed out: the connection moved no byte for the whole timeout, and retries did not help: check the network to the storage account, or raise timeout"
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNABORTED) {
		return "the connection was reset or closed mid-request (" + detail(err) + "), and retries did not help: check the network, proxies and firewalls between pipe and the storage account"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return fmt.Sprintf("cannot resolve %s: check account_url (or the connection string's endpoint) and DNS", dnsErr.Name)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// The URL may carry a SAS token: say only what went wrong.
		return fmt.Sprintf("%s (after retries): check the network and account_url", redact(ue.Err.Error()))
	}
	return redact(err.Error())
}

// describeResponse says what an answer of the service means: its code
// and status, the advice for them, and what the service says.
func describeResponse(re *azcore.ResponseError) string {
	code := bloberror.Code(re.ErrorCode)
	head := fmt.Sprintf("%s (HTTP %d)", re.ErrorCode, re.StatusCode)
	if re.ErrorCode == "" {
		head = fmt.Sprintf("HTTP %d", re.StatusCode)
	}
	advice := blobAdvice(code, re.StatusCode)
	msg := serviceMessage(re)
	switch {
	case advice == "" && msg == "":
		return head
	case advice == "":
		return head + ": " + msg
	case re.StatusCode == http.StatusForbidden && msg != "":
		return head + ": " + advice + " (the service says: " + msg + ")"
	}
	return head + ": " + advice
}

// blobAdvice is what an error code of the service (or, without one, the
// status) means and what to do about it, "" when there is no advice. It
// is one table of cases tried in order, each one line of advice: its
// complexity is the number of codes it knows, not branching to follow.
func blobAdvice(code bloberror.Code, status int) string {
	switch {
	case code == bloberror.ContainerNotFound:
		return "the container does not exist: create it (az storage container create --name " + containerPlaceholder + ") or fix bucket"
	case code == bloberror.BlobNotFound || status == http.StatusNotFound && code == "":
		return "no such blob"
	case code == bloberror.AuthenticationFailed || code == bloberror.InvalidAuthenticationInfo:
		return "the storage account refused the credentials: check account_key, sas_token or connection_string (a rotated key, an expired SAS, the wrong account, or a clock that is off by more than 15 minutes)"
	case code == bloberror.AuthorizationPermissionMismatch || code == bloberror.AuthorizationResourceTypeMismatch ||
		code == bloberror.AuthorizationServiceMismatch || code == bloberror.InsufficientAccountPermissions:
		return "the credentials may not do this: " + permissions
	case code == bloberror.AuthorizationFailure:
		return "the service refused the request: check the credentials (a wrong account_key or SAS signature), their permissions (" + permissions + "), and the account's firewall and network rules"
	case code == bloberror.AuthorizationSourceIPMismatch || code == bloberror.AuthorizationProtocolMismatch:
		return "the SAS does not allow this address or protocol: check its sip and spr fields"
	case code == bloberror.AccountIsDisabled:
		return "the storage account is disabled"
	case code == bloberror.ConditionNotMet:
		return "the blob changed while it was being read: run the restore again (and keep backups from being overwritten while restoring)"
	case code == bloberror.BlobArchived:
		return "the blob is in the Archive tier: rehydrate it (set its tier to Hot or Cool) and restore once that finished"
	case code == bloberror.BlockCountExceedsLimit || code == bloberror.BlockListTooLong:
		return "the object needs more than 50,000 blocks: raise block_size"
	case code == bloberror.RequestBodyTooLarge:
		return "a block or put is larger than the service accepts: lower block_size or max_single_put_size"
	case code == bloberror.MD5Mismatch || code == bloberror.CRC64Mismatch:
		return "the service's checksum of the data did not match what pipe sent: the data was damaged on the way (check proxies and the network)"
	case code == bloberror.InvalidBlobOrBlock || code == bloberror.InvalidBlockList || code == bloberror.InvalidBlockID:
		return "the service rejected the block list (blocks expire a week after staging): run the backup again"
	case code == bloberror.ServerBusy || code == bloberror.OperationTimedOut || code == bloberror.InternalError || status >= 500:
		return "the service is busy or failing and retries did not help: try again later, or lower concurrency"
	case code == bloberror.ContainerBeingDeleted || code == bloberror.ContainerDisabled:
		return "the container is being deleted or is disabled"
	case code == bloberror.InvalidResourceName:
		return "the service rejected the container or blob name"
	case code == bloberror.LeaseIDMissing || code == bloberror.LeaseAlreadyPresent:
		return "the blob has an active lease: break it or write elsewhere"
	case code == bloberror.BlobImmutableDueToPolicy:
		return "an immutability policy or legal hold protects the blob"
	case code == bloberror.InvalidRange:
		return "the requested range is not in the blob"
	case status == http.StatusForbidden:
		return "access denied: check the credentials and their permissions"
	}
	return ""
}

const permissions = "a SAS needs read and list to restore, write and create to back up, delete for retention; an identity needs the Storage Blob Data Contributor role"

var messageRE = regexp.MustCompile(`(?s)<Message>(.*?)</Message>|"message"\s*:\s*"([^"]*)"`)

// serviceMessage is the first line of the message in the service's error
// body (it names, say, the header that was wrong), without anything that
// looks like a signature.
func serviceMessage(re *azcore.ResponseError) string {
	m := messageRE.FindStringSubmatch(re.Error())
	if m == nil {
		return ""
	}
	msg := m[1] + m[2]
	msg, _, _ = strings.Cut(strings.TrimSpace(msg), "\n")
	msg = strings.TrimSpace(msg)
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return redact(msg)
}

// containerPlaceholder stands for the container's name in advice; a
// client puts the name in (see client.explain).
const containerPlaceholder = "NAME"

// explain is explain with the client's container named in the advice.
func (cl *client) explain(op, where string, err error) error {
	err = explain(op, where, err)
	var oe *opError
	if errors.As(err, &oe) {
		oe.msg = strings.Replace(oe.msg, "--name "+containerPlaceholder+")", "--name "+cl.bucket+")", 1)
	}
	return err
}

// isPermanent reports whether retrying err cannot help: a cancelled
// context, or an answer of the service other than a timeout or throttling.
func isPermanent(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode < 500 && re.StatusCode != http.StatusRequestTimeout && re.StatusCode != http.StatusTooManyRequests
	}
	return false
}

var (
	sigRE = regexp.MustCompile(`(?i)(sig|signature|accountkey|sharedaccesssignature)=[^&;\s"']*`)
	urlRE = regexp.MustCompile(`(https?://[^\s"'?]*)\?[^\s"']*`)
)

// redact removes query strings from URLs and signature-like values from
// text that may repeat a request.
func redact(s string) string {
	s = urlRE.ReplaceAllString(s, "$1")
	return sigRE.ReplaceAllString(s, "$1=(sensitive)")
}

// detail is the innermost part of a transport error (what the socket
// said), without the request's URL.
func detail(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	d := redact(err.Error())
	if len(d) > 200 {
		d = d[:200] + "…"
	}
	return d
}

// stripQuery returns u without its query string (which may hold a SAS).
func stripQuery(u string) string {
	base, _, _ := strings.Cut(u, "?")
	return base
}
