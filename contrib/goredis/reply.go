package goredis

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"
)

// args returns a redigo command's arguments as go-redis writes them the way
// redigo would: a redigo.Argument as its RedisArg, and what neither client
// knows (go-redis refuses it, redigo prints it) printed with fmt.
func args(name string, in []any) []any {
	out := make([]any, 0, 1+len(in))
	out = append(out, name)
	for _, a := range in {
		if ra, ok := a.(redigo.Argument); ok {
			a = ra.RedisArg()
		}
		switch a.(type) {
		case string, []byte, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64,
			float32, float64, bool, nil:
		default:
			a = fmt.Sprint(a)
		}
		out = append(out, a)
	}
	return out
}

// reply returns what redigo returns for cmd's reply: a bulk or simple string
// as []byte, an integer as int64, an array as []any of the same, a nil
// reply as nil, and an error reply as a redigo.Error (in an array too), so
// that worqr's checks of error replies (NOSCRIPT, MOVED, ...) read them as
// they read redigo's. A connection error is returned as it is.
func reply(cmd *redis.Cmd) (any, error) {
	v, err := cmd.Result()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, replyErr(err)
	}
	return value(v), nil
}

// replyErr returns a Redis error reply as a redigo.Error, and any other
// error as it is.
func replyErr(err error) error {
	var re redis.Error
	if errors.As(err, &re) {
		return redigo.Error(re.Error())
	}
	return err
}

// value converts a reply value go-redis read (RESP2: New refuses a client
// that speaks RESP3).
func value(v any) any {
	switch v := v.(type) {
	case string:
		return []byte(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = value(e)
		}
		return out
	case redis.Error:
		return redigo.Error(v.Error())
	}
	return v // int64, nil
}

// parseReply returns the RESP2 reply in raw (one whole reply, as go-redis's
// RawCmd reads it) as redigo reads it: a simple string as a string, a bulk
// string as []byte, an integer as int64, an array as []any of the same, a
// nil bulk string or array as nil, and an error reply as a redigo.Error
// (the result's error at the top, a value in an array). A bulk string is a
// slice of raw (capped at its end: appending to it copies), not a copy.
func parseReply(raw []byte) (result, error) {
	v, rest, err := parse(raw)
	if err != nil {
		return result{}, err
	}
	if len(rest) != 0 {
		return result{}, errProtocol("trailing bytes after the reply")
	}
	if e, ok := v.(redigo.Error); ok {
		return result{err: e}, nil
	}
	return result{v: v}, nil
}

// Shared as redigo shares them.
var (
	okReply   any = "OK"
	pongReply any = "PONG"
)

type errProtocol string

func (e errProtocol) Error() string { return "goredis: protocol error: " + string(e) }

// parse reads one reply from the front of b and returns it and what
// follows it.
func parse(b []byte) (any, []byte, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 2 || b[i-1] != '\r' {
		return nil, nil, errProtocol("bad line")
	}
	line, rest := b[1:i-1], b[i+1:]
	switch b[0] {
	case '+':
		switch string(line) {
		case "OK":
			return okReply, rest, nil
		case "PONG":
			return pongReply, rest, nil
		}
		return string(line), rest, nil
	case '-':
		return redigo.Error(line), rest, nil
	case ':':
		n, ok := parseInt(line)
		if !ok {
			return nil, nil, errProtocol("bad integer")
		}
		return n, rest, nil
	case '$':
		n, ok := parseInt(line)
		switch {
		case !ok:
			return nil, nil, errProtocol("bad bulk length")
		case n < 0:
			return nil, rest, nil
		case int64(len(rest)) < n+2 || rest[n] != '\r' || rest[n+1] != '\n':
			return nil, nil, errProtocol("short bulk string")
		}
		return rest[:n:n], rest[n+2:], nil
	case '*':
		n, ok := parseInt(line)
		switch {
		case !ok || n > int64(len(rest)):
			return nil, nil, errProtocol("bad array length")
		case n < 0:
			return nil, rest, nil
		}
		out := make([]any, n)
		for j := range out {
			var err error
			if out[j], rest, err = parse(rest); err != nil {
				return nil, nil, err
			}
		}
		return out, rest, nil
	}
	return nil, nil, errProtocol("unexpected reply type " + strconv.Quote(string(b[:1])))
}

// parseInt reads a RESP integer (an optional '-', then digits).
func parseInt(p []byte) (int64, bool) {
	if len(p) >= 19 { // may not fit: let strconv tell
		n, err := strconv.ParseInt(string(p), 10, 64)
		return n, err == nil
	}
	neg := len(p) > 0 && p[0] == '-'
	if neg {
		p = p[1:]
	}
	if len(p) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
