package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/rs/xid"
	"github.com/spf13/cobra"
)

// output is the -o flag of a listing command.
type output struct{ format string }

func (o *output) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "table", "output format: table (for people) or json (for scripts)")
}

func (o *output) check() error {
	switch o.format {
	case "table", "json":
		return nil
	}
	return usagef("-o/--output %q: want table or json", o.format)
}

func (o *output) json() bool { return o.format == "json" }

// writeJSON prints v as indented JSON with a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // for a terminal or jq, not a web page: <n> stays <n>
	return enc.Encode(v)
}

// table prints aligned columns: a header row and then rows.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		// A tab or newline inside a cell would break the columns.
		cells[i] = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// kv prints "key  value" lines, aligned.
func kv(w io.Writer, pairs ...string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(tw, "%s\t%s\n", pairs[i], pairs[i+1])
	}
	return tw.Flush()
}

func itoa[T ~int | ~int64](n T) string { return strconv.FormatInt(int64(n), 10) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// orDash shows an empty text as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clip shortens s to n runes for a table cell.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// preview shows a payload in a table cell: text as is (clipped), binary as
// its size.
func preview(b []byte, n int) string {
	if len(b) == 0 {
		return "-"
	}
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes, binary)", len(b))
	}
	return clip(string(b), n)
}

// when prints a time in UTC (RFC 3339), or "-" when unset.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// ago prints a duration for people: 0s, 850ms, 12s, 3m4s, 2h5m.
func ago(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// jsonTime is a time for JSON: RFC 3339 in UTC, or null when unset.
func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// writeJSONLine prints v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// idTime reads the time of a task or run id (an xid: second precision).
func idTime(id string) time.Time {
	x, err := xid.FromString(id)
	if err != nil {
		return time.Time{}
	}
	return x.Time()
}
