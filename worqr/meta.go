package worqr

import (
	"encoding/json"
)

// MaxMetaBytes is the most metadata (RunOpts.Meta, ChildSpec.Meta,
// EnqueueOpts.Meta) one run, child or task may carry, in bytes once encoded
// (as a JSON object).
const MaxMetaBytes = 4096

// encodeMeta checks metadata given in field and encodes it as it is stored
// ("" for none: nothing is stored).
func encodeMeta(field string, m map[string]string) (string, error) {
	if len(m) == 0 {
		return "", nil
	}
	for k := range m {
		if k == "" {
			return "", invalid(field, "has an empty name")
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", invalid(field, "cannot be encoded: %v", err)
	}
	if len(b) > MaxMetaBytes {
		return "", invalid(field, "is %d bytes encoded, over MaxMetaBytes (%d)", len(b), MaxMetaBytes)
	}
	return string(b), nil
}

// decodeMeta decodes stored metadata; nil when there is none, or when it
// cannot be read (metadata is advisory: a run, child or task whose
// metadata is damaged still runs, without it).
func decodeMeta(s string) map[string]string {
	if s == "" {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil
	}
	return m
}
