package rdb

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// HistoryMax is how many failed attempts a task's history keeps: the last
// ones (HISTORY_MAX in lua/include/history.lua). Attempt seq (0, 1, ...) is
// field FieldHistory + (seq % HistoryMax) of the task's hash, and
// FieldHistorySeq counts them, so a failure writes one field and the
// history never grows past HistoryMax fields.
const HistoryMax = 10

// Attempt is one failed attempt of a task, as its history keeps it.
type Attempt struct {
	// Number is the task's failure count with this attempt (1 for its
	// first failed attempt; it starts again at 1 after a requeue from the
	// dead set).
	Number int
	// StartedAt is when its taking was handed out, EndedAt when it ended
	// (unix ms, Redis time; StartedAt 0 when unknown).
	StartedAt, EndedAt int64
	// Outcome is how it ended: "retry" (scheduled to run again, or put back
	// behind its batch's head) or "dead".
	Outcome string
	// Worker is the worker (or a gateway session's worker) that ran it.
	Worker string
	// Error is its error, as stored (cut as the last error is).
	Error string
}

// attemptJSON is an Attempt as a history field holds it (history.lua).
type attemptJSON struct {
	Number    int    `json:"a"`
	StartedAt int64  `json:"s"`
	EndedAt   int64  `json:"e"`
	Outcome   string `json:"o"`
	Worker    string `json:"w"`
	Error     string `json:"m"`
}

// DecodeAttempt reads one history field's value.
func DecodeAttempt(v string) (Attempt, error) {
	var a attemptJSON
	if err := json.Unmarshal([]byte(v), &a); err != nil {
		return Attempt{}, fmt.Errorf("rdb: attempt history entry: %w", err)
	}
	return Attempt(a), nil
}

// historyFields are the fields of a task hash that hold its history: its
// count, then slot 0 .. HistoryMax-1.
var historyFields = func() []any {
	out := []any{FieldHistorySeq}
	for i := range HistoryMax {
		out = append(out, FieldHistory+strconv.Itoa(i))
	}
	return out
}()

// decodeHistory returns the attempts of a task hash m (with the fields of
// historyFields), oldest first. An entry that does not decode (data
// changed by hand) is left out.
func decodeHistory(m map[string]string) []Attempt {
	seq, err := strconv.ParseInt(m[FieldHistorySeq], 10, 64)
	if err != nil || seq <= 0 {
		return nil
	}
	var out []Attempt
	for s := max(seq-HistoryMax, 0); s < seq; s++ {
		v, ok := m[FieldHistory+strconv.FormatInt(s%HistoryMax, 10)]
		if !ok {
			continue
		}
		if a, err := DecodeAttempt(v); err == nil {
			out = append(out, a)
		}
	}
	return out
}
