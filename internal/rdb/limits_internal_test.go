package rdb

import "strings"

// Hooks for limits_test.go: the Lua of a script as each way of running it
// compiles it.

// ScriptNames returns the names of the scripts, in load order.
func ScriptNames() []string {
	var out []string
	for _, sc := range scripts {
		out = append(out, sc.name)
	}
	return out
}

// EvalParts returns the Lua that EVAL compiles for script name in two
// parts: head, what runs before the script's own text (the migration
// guard's block, the includes and the layouts), and body, that text.
func EvalParts(name string) (head, body string) {
	for _, sc := range scripts {
		if sc.name == name {
			return strings.TrimSuffix(sc.src, sc.body), sc.body
		}
	}
	panic("rdb: no script " + name)
}

// LibraryParts returns the function library's Lua in parts: heads (every
// include, once, then the table of functions), fns (each script as a
// function stored in it, in the order of ScriptNames). Its registration
// calls are left out.
func LibraryParts() (heads string, fns []string) { return libraryParts() }
