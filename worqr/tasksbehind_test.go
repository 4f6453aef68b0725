package worqr_test

import (
	"context"
	"errors"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// TasksBehind names the argument it refuses: a negative limit was refused
// as a bad offset.
func TestTasksBehindNamesTheBadArgument(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		offset, limit int
		field         string
	}{
		{offset: 0, limit: -1, field: "limit"},
		{offset: -1, limit: 10, field: "offset"},
	} {
		_, err := in.TasksBehind(context.Background(), "q", "k", tc.offset, tc.limit)
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("TasksBehind(offset %d, limit %d) = %v; want an *InvalidError naming %s", tc.offset, tc.limit, err, tc.field)
		}
	}
}
