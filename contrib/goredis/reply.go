package goredis

import (
	"errors"
	"fmt"

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
