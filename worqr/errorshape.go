package worqr

import (
	"regexp"
	"strings"
)

var (
	reUUID   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	reHex0x  = regexp.MustCompile(`(?i)\b0x[0-9a-f]+\b`)
	reWord   = regexp.MustCompile(`[0-9A-Za-z]+`)
	reDigits = regexp.MustCompile(`[0-9]+`)
	reSpaces = regexp.MustCompile(`\s+`)
)

// ErrorShape replaces the parts of an error text that differ from one task
// to the next by placeholders, so that dead tasks can be grouped by error
// (`worqr dead errors`, the dashboard's dead page): UUIDs by <uuid>, hex numbers and ids (0x…,
// or runs of at least 8 hex digits holding digits and letters) by <hex>, task ids (20
// characters of 0-9a-v holding a digit: xids) by <id>, and every other run of
// digits by <n>. Runs of white space become one space.
func ErrorShape(s string) string {
	s = reUUID.ReplaceAllString(s, "<uuid>")
	s = reHex0x.ReplaceAllString(s, "<hex>")
	s = reWord.ReplaceAllStringFunc(s, func(w string) string {
		if !strings.ContainsAny(w, "0123456789") {
			return w
		}
		lw := strings.ToLower(w)
		if len(lw) >= 8 && strings.Trim(lw, "0123456789abcdef") == "" && strings.Trim(lw, "0123456789") != "" {
			return "<hex>"
		}
		if len(lw) == 20 && w == lw && strings.Trim(lw, "0123456789abcdefghijklmnopqrstuv") == "" {
			return "<id>"
		}
		return reDigits.ReplaceAllString(w, "<n>")
	})
	return strings.TrimSpace(reSpaces.ReplaceAllString(s, " "))
}
