// Package errshape reduces an error text to its shape, for grouping dead
// tasks by error: see worqr.ErrorShape, which documents the rules.
package errshape

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

// Of returns the shape of error text s.
func Of(s string) string {
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
