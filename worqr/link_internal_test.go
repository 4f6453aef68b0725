package worqr

import (
	"reflect"
	"testing"

	"github.com/worqr/worqr-go/internal/link"
)

// Every value package remote and package load read from internal/link is
// set by this package's init: one left nil would fail their init, in
// every program that imports them.
func TestLinkIsFilled(t *testing.T) {
	for name, f := range map[string]any{
		"ConfigDefaults": link.ConfigDefaults, "FillQueue": link.FillQueue, "ValidateFlows": link.ValidateFlows,
		"CheckName": link.CheckName, "ParseQueue": link.ParseQueue, "WarnPool": link.WarnPool,
		"NewEvents": link.NewEvents, "NewReaper": link.NewReaper, "InitEngine": link.InitEngine,
		"WriteSettings": link.WriteSettings, "Unwrap": link.Unwrap, "SplitTyped": link.SplitTyped,
		"ChildResults": link.ChildResults, "EventOf": link.EventOf, "LoadTarget": link.LoadTarget,
		"CheckPayloadPrefix": link.CheckPayloadPrefix,
	} {
		t.Run(name+" is a func", func(t *testing.T) {
			if f == nil || reflect.TypeOf(f).Kind() != reflect.Func {
				t.Fatalf("link.%s = %T, want a func", name, f)
			}
		})
	}
}
