package rdb

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"testing"
)

// Store.Tasks reads only recordFields of each hash (a flow run's hash
// holds a record of every child it fanned out): every field DecodeTask
// reads must be among them. Each Field constant of names.go is set alone
// next to a payload; one that changes the record and is not read by
// Tasks would show in a listing as unset.
func TestRecordFieldsCoverDecodeTask(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	ast.Inspect(f, func(n ast.Node) bool {
		v, ok := n.(*ast.ValueSpec)
		if !ok || len(v.Names) != 1 || len(v.Values) != 1 || len(v.Names[0].Name) < 6 || v.Names[0].Name[:5] != "Field" {
			return true
		}
		if lit, ok := v.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s, _ := strconv.Unquote(lit.Value)
			fields = append(fields, s)
		}
		return true
	})
	if len(fields) < 20 {
		t.Fatalf("found %d Field constants in names.go: the parse is wrong", len(fields))
	}
	base := DecodeTask("a", map[string]string{FieldPayload: "p"})
	for _, name := range fields {
		if name == FieldPayload {
			continue
		}
		got := DecodeTask("a", map[string]string{FieldPayload: "p", name: "7"})
		read := slices.Contains(recordFields, any(name))
		if changes := !reflect.DeepEqual(got, base); changes && !read {
			t.Errorf("DecodeTask reads field %q, which Tasks does not ask for (recordFields)", name)
		} else if !changes && read {
			t.Errorf("recordFields holds %q, which DecodeTask does not read", name)
		}
	}
}
