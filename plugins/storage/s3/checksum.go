package s3

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"hash/crc32"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
)

// checksum is the algorithm of the checksums the sink sends with every
// part (and single-request object), which S3 verifies before it accepts the
// bytes, and from which it checks the whole upload at completion.
//
// The sink computes them itself and sends them as headers, instead of
// leaving them to the SDK: it then knows each part's value for
// CompleteMultipartUpload, and no request ever uses the aws-chunked
// trailer encoding that the SDK picks over HTTPS, which S3-compatible stores
// reject more often than they accept. A store that rejects the algorithm
// anyway gets an error that says to set checksum = "none".
type checksum struct {
	algo types.ChecksumAlgorithm // "" for none
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var checksums = map[string]checksum{
	"crc32c": {types.ChecksumAlgorithmCrc32c},
	"crc32":  {types.ChecksumAlgorithmCrc32},
	"sha256": {types.ChecksumAlgorithmSha256},
	"none":   {},
}

func (c checksum) enabled() bool { return c.algo != "" }

// runningSums computes what a part's upload needs of its bytes: the
// checksum and, over plain HTTP, where SigV4 signs the body, its SHA-256
// (handed to the SDK, which would otherwise read the body again for it).
// The first part of an object is summed while its bytes arrive, so that an
// object of one part (a WAL segment) goes up as soon as its last byte is
// in; the other parts are summed as they go up (of).
type runningSums struct {
	algo   types.ChecksumAlgorithm
	crc    hash.Hash32 // crc32c or crc32; nil otherwise
	sha    hash.Hash   // a sha256 checksum or a signed payload; nil otherwise
	signed bool        // the request signs its payload's SHA-256
	n      int         // bytes summed
}

// running returns the sums a part needs, or nil when it needs none.
func (c checksum) running(signed bool) *runningSums {
	r := &runningSums{algo: c.algo, signed: signed}
	switch c.algo {
	case types.ChecksumAlgorithmCrc32c:
		r.crc = crc32.New(castagnoli)
	case types.ChecksumAlgorithmCrc32:
		r.crc = crc32.NewIEEE()
	}
	if signed || c.algo == types.ChecksumAlgorithmSha256 {
		r.sha = sha256.New()
	}
	if r.crc == nil && r.sha == nil {
		return nil
	}
	return r
}

// of returns the sums of a whole part, or nil when it needs none.
func (c checksum) of(b []byte, signed bool) *runningSums {
	r := c.running(signed)
	if r != nil {
		r.write(b)
	}
	return r
}

func (r *runningSums) write(p []byte) {
	if r.crc != nil {
		r.crc.Write(p)
	}
	if r.sha != nil {
		r.sha.Write(p)
	}
	r.n += len(p)
}

// put sets a PutObject's checksum from the sums and returns the options
// that hand the SDK the payload's SHA-256 (none when it is not signed). A
// nil r sets nothing.
func (r *runningSums) put(in *s3.PutObjectInput) []func(*s3.Options) {
	if r == nil {
		return nil
	}
	in.ChecksumAlgorithm, in.ChecksumCRC32C, in.ChecksumCRC32, in.ChecksumSHA256 = r.values()
	return r.options()
}

// part does what put does for an UploadPart, and returns the completed
// part to list in CompleteMultipartUpload (without its ETag yet).
func (r *runningSums) part(in *s3.UploadPartInput) (types.CompletedPart, []func(*s3.Options)) {
	if r == nil {
		return types.CompletedPart{PartNumber: in.PartNumber}, nil
	}
	in.ChecksumAlgorithm, in.ChecksumCRC32C, in.ChecksumCRC32, in.ChecksumSHA256 = r.values()
	return types.CompletedPart{PartNumber: in.PartNumber, ChecksumCRC32C: in.ChecksumCRC32C, ChecksumCRC32: in.ChecksumCRC32, ChecksumSHA256: in.ChecksumSHA256}, r.options()
}

// values are the algorithm ("" for none) and its checksum header, nil for
// the others.
func (r *runningSums) values() (algo types.ChecksumAlgorithm, crc32c, crc32, sha *string) {
	switch r.algo {
	case types.ChecksumAlgorithmCrc32c:
		crc32c = b64(r.crc.Sum(nil))
	case types.ChecksumAlgorithmCrc32:
		crc32 = b64(r.crc.Sum(nil))
	case types.ChecksumAlgorithmSha256:
		sha = b64(r.sha.Sum(nil))
	}
	return r.algo, crc32c, crc32, sha
}

func (r *runningSums) options() []func(*s3.Options) {
	if !r.signed {
		return nil
	}
	return []func(*s3.Options){payloadHash(hex.EncodeToString(r.sha.Sum(nil)))}
}

func b64(b []byte) *string {
	s := base64.StdEncoding.EncodeToString(b)
	return &s
}

// payloadHash gives the SDK a request's payload SHA-256, which it would
// otherwise compute by reading the body once more before sending it. The
// value is set at the start of the finalize step, ahead of every attempt,
// where the SDK's signing looks for a precomputed hash.
func payloadHash(sum string) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("PipeKnownPayloadHash",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					return next.HandleFinalize(v4.SetPayloadHash(ctx, sum), in)
				}), middleware.Before)
		})
	}
}
