package gateway

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonCodecs replace connect's JSON codec (Connect's application/json and
// gRPC's application/grpc+json), which drops the fields of a request it
// does not know: a misspelled field ("delayMS") was ignored and the call
// ran without it (the task ran at once). A request naming a field its
// message does not have is refused with invalid_argument, whose message
// names the field.
func jsonCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(jsonCodec{name: "json"}),
		connect.WithCodec(jsonCodec{name: "json; charset=utf-8"}),
	}
}

type jsonCodec struct{ name string }

// jsonIn reads requests: fields are named as in the .proto (delay_ms) or
// in lowerCamelCase (delayMs); any other name is an error.
var jsonIn = protojson.UnmarshalOptions{}

// jsonOut writes replies.
var jsonOut = protojson.MarshalOptions{}

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) IsBinary() bool { return false }

func (c jsonCodec) Marshal(m any) ([]byte, error) {
	return c.MarshalAppend(nil, m)
}

func (c jsonCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("worqr gateway: %T is not a protobuf message", m)
	}
	return jsonOut.MarshalAppend(dst, pm)
}

func (c jsonCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("worqr gateway: %T is not a protobuf message", m)
	}
	if len(data) == 0 {
		return errors.New("a zero-length body is not a JSON object")
	}
	if err := jsonIn.Unmarshal(data, pm); err != nil {
		// protojson's error names the field and where it is:
		// proto: (line 1:37): unknown field "delayMS"
		return fmt.Errorf("%s: %w", pm.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}
