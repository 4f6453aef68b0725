package worqr

import "github.com/worqr/worqr-go/internal/engine"

// MaxMetaBytes is the most metadata (RunOpts.Meta, ChildSpec.Meta,
// EnqueueOpts.Meta) one run, child or task may carry, in bytes once encoded
// (as a JSON object).
const MaxMetaBytes = engine.MaxMetaBytes

// encodeMeta checks metadata given in field and encodes it as it is stored
// ("" for none: nothing is stored).
func encodeMeta(field string, m map[string]string) (string, error) {
	s, err := engine.EncodeMeta(field, m)
	return s, asInvalid(err)
}
