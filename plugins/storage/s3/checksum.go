package s3

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
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
	algo types.ChecksumAlgorithm
	sum  func([]byte) string
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte, tab *crc32.Table) string {
	var out [4]byte
	binary.BigEndian.PutUint32(out[:], crc32.Checksum(b, tab))
	return base64.StdEncoding.EncodeToString(out[:])
}

var checksums = map[string]checksum{
	"crc32c": {types.ChecksumAlgorithmCrc32c, func(b []byte) string { return crc(b, castagnoli) }},
	"crc32":  {types.ChecksumAlgorithmCrc32, func(b []byte) string { return crc(b, crc32.IEEETable) }},
	"sha256": {types.ChecksumAlgorithmSha256, func(b []byte) string {
		h := sha256.Sum256(b)
		return base64.StdEncoding.EncodeToString(h[:])
	}},
	"none": {},
}

func (c checksum) enabled() bool { return c.sum != nil }

func (c checksum) put(in *s3.PutObjectInput, b []byte) {
	if !c.enabled() {
		return
	}
	in.ChecksumAlgorithm = c.algo
	v := c.sum(b)
	switch c.algo {
	case types.ChecksumAlgorithmCrc32c:
		in.ChecksumCRC32C = &v
	case types.ChecksumAlgorithmCrc32:
		in.ChecksumCRC32 = &v
	case types.ChecksumAlgorithmSha256:
		in.ChecksumSHA256 = &v
	}
}

// part sets the checksum of an UploadPart and returns the completed part
// to list in CompleteMultipartUpload (without its ETag yet).
func (c checksum) part(in *s3.UploadPartInput, b []byte) types.CompletedPart {
	done := types.CompletedPart{PartNumber: in.PartNumber}
	if !c.enabled() {
		return done
	}
	in.ChecksumAlgorithm = c.algo
	v := c.sum(b)
	switch c.algo {
	case types.ChecksumAlgorithmCrc32c:
		in.ChecksumCRC32C, done.ChecksumCRC32C = &v, &v
	case types.ChecksumAlgorithmCrc32:
		in.ChecksumCRC32, done.ChecksumCRC32 = &v, &v
	case types.ChecksumAlgorithmSha256:
		in.ChecksumSHA256, done.ChecksumSHA256 = &v, &v
	}
	return done
}
