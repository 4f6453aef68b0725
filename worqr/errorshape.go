package worqr

import "github.com/worqr/worqr-go/internal/errshape"

// ErrorShape replaces the parts of an error text that differ from one task
// to the next by placeholders, so that dead tasks can be grouped by error
// (`worqr dead errors`, the dashboard's dead page): UUIDs by <uuid>, hex numbers and ids (0x…,
// or runs of at least 8 hex digits holding digits and letters) by <hex>, task ids (20
// characters of 0-9a-v holding a digit: xids) by <id>, and every other run of
// digits by <n>. Runs of white space become one space.
func ErrorShape(s string) string { return errshape.Of(s) }
