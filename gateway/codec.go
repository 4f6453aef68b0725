package gateway

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonCodecs replace connect's JSON codec (Connect's application/json and
// gRPC's application/grpc+json) with a strict one:
//
//   - a request naming a field its message does not have is refused with
//     invalid_argument, whose message names the field (connect's codec
//     dropped it: a misspelled "delayMS" ran the task at once);
//   - a reply carries every field of its message, zero values included
//     (connect's codec left them out, so a client could not tell a count
//     of 0, or an empty list, from a field of a newer gateway it does not
//     know, and every client had to default each one).
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

// jsonOut writes replies: every field, named in lowerCamelCase (the JSON
// names; UseProtoNames would send delay_ms), a message field not set as
// null, an empty list as [] and an empty map as {}.
var jsonOut = protojson.MarshalOptions{EmitUnpopulated: true}

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
