package sdk

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// ExplainIO adds what to do to the errors a full, limited or forbidden
// disk gives, for endpoints that write files (and for pipe itself when it
// writes an endpoint's file directly).
func ExplainIO(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: the disk is full; free space there or point the sink at another disk", err)
	case errors.Is(err, syscall.EFBIG):
		return fmt.Errorf("%w: the file size limit (ulimit -f) or the filesystem's maximum file size was reached", err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: pipe's user may not write there", err)
	}
	return err
}
