package worqr_test

import (
	"errors"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

// SkipRetry's error reads as the error it marks (the dead set groups by
// that text) and matches both it and ErrSkipRetry.
func TestSkipRetryKeepsTheText(t *testing.T) {
	cause := errors.New("cannot decode payload")
	err := worqr.SkipRetry(cause)
	if err.Error() != "cannot decode payload" || !errors.Is(err, worqr.ErrSkipRetry) || !errors.Is(err, cause) {
		t.Fatalf("SkipRetry(cause) = %q (is ErrSkipRetry %v, is cause %v)", err, errors.Is(err, worqr.ErrSkipRetry), errors.Is(err, cause))
	}
	if err := worqr.SkipRetry(nil); err != worqr.ErrSkipRetry {
		t.Fatalf("SkipRetry(nil) = %v, want ErrSkipRetry", err)
	}
}
