package engine

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Bounds of what one call writes (worqr documents each under the same
// name).
const (
	// MaxChildren is the most children one stage fans out.
	MaxChildren = 1000
	// MaxStateFields is the most state fields one call writes.
	MaxStateFields = 1000
	// MaxFieldNameLen is the longest state field name, in bytes.
	MaxFieldNameLen = 200
	// MaxStageBytes bounds the bytes one start or stage end writes.
	MaxStageBytes = 4 << 20
	// MaxMetaBytes is the most metadata one run, child or task carries,
	// encoded.
	MaxMetaBytes = 4096
	// MaxErrorLen caps the error text stored with a task.
	MaxErrorLen = 8 << 10
)

// InputError is input that cannot work: Field names it, Rule says what it
// must be. The front packages hand it to their callers as their own
// invalid-input error.
type InputError struct {
	Field, Rule string
}

func (e *InputError) Error() string { return e.Field + " " + e.Rule }

// Invalid returns an *InputError.
func Invalid(field, format string, args ...any) error {
	return &InputError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// StageBudget is the most bytes one start or stage end writes.
func StageBudget(maxPayload int) int { return max(MaxStageBytes, maxPayload) }

// CheckStateFields checks state fields given in field: at most
// MaxStateFields, names non-empty and at most MaxFieldNameLen bytes,
// values at most maxValue bytes, names and values together at most budget
// bytes. It returns their size.
func CheckStateFields(field string, m map[string]string, maxValue, budget int) (int, error) {
	if len(m) > MaxStateFields {
		return 0, Invalid(field, "has %d fields (at most %d per call)", len(m), MaxStateFields)
	}
	size := 0
	for k, v := range m {
		switch {
		case k == "":
			return 0, Invalid(field, "has an empty field name")
		case len(k) > MaxFieldNameLen:
			return 0, Invalid(fmt.Sprintf("%s[%.20q...]", field, k), "name is %d bytes long (at most %d)", len(k), MaxFieldNameLen)
		case len(v) > maxValue:
			return 0, Invalid(fmt.Sprintf("%s[%q]", field, k), "is %d bytes, over MaxPayloadBytes (%d)", len(v), maxValue)
		}
		size += len(k) + len(v)
	}
	if size > budget {
		return 0, Invalid(field, "holds %d bytes of names and values (at most %d per call: 4 MiB, or MaxPayloadBytes when larger)", size, budget)
	}
	return size, nil
}

// EncodeMeta checks metadata given in field and encodes it as it is
// stored ("" for none: nothing is stored).
func EncodeMeta(field string, m map[string]string) (string, error) {
	if len(m) == 0 {
		return "", nil
	}
	for k := range m {
		if k == "" {
			return "", Invalid(field, "has an empty name")
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", Invalid(field, "cannot be encoded: %v", err)
	}
	if len(b) > MaxMetaBytes {
		return "", Invalid(field, "is %d bytes encoded, over %d", len(b), MaxMetaBytes)
	}
	return string(b), nil
}

// DecodeMeta decodes stored metadata; nil when there is none, or when it
// cannot be read (metadata is advisory: a run, child or task whose
// metadata is damaged still runs, without it).
func DecodeMeta(s string) map[string]string {
	if s == "" {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil
	}
	return m
}

// Clip cuts an error's text to MaxErrorLen bytes, as it is stored and
// published, at a character's start.
func Clip(msg string) string {
	if len(msg) <= MaxErrorLen {
		return msg
	}
	n := MaxErrorLen
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n-- // not inside a character: the cut text stays valid UTF-8
	}
	return msg[:n]
}
