// Package gateway serves worqr to programs in any language: one API over
// gRPC, gRPC-Web and JSON over HTTP (the Connect protocol) on one port. It is
// a thin layer over remote.Server (workers), worqr.Client (producers) and
// worqr.Inspector (queue stats, task reads): every guarantee is theirs. A remote worker
// opens a session (a worqr worker id), beats it, takes tasks and ends each
// taking by its pid, the fencing token; an end about a taking the session no
// longer owns is refused with failed_precondition and changes nothing.
//
// It is a module of its own so that library users do not inherit connect and
// protobuf. The .proto is in proto/, the generated code in gen/ (make proto).
package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/xid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1"
	"github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1/gatewayv1connect"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// Config is what a gateway serves. Remote, Client and Inspector are
// required; the gateway never starts or stops them.
type Config struct {
	Remote    *remote.Server
	Client    *worqr.Client
	Inspector *worqr.Inspector
	// Token, when set, is the bearer token every call must carry
	// (Authorization: Bearer <token>); others get unauthenticated.
	Token string
	// MaxMessageBytes caps a request message, and a Take's reply as it
	// is sent, in protobuf or in JSON (base64 and JSON make a payload a
	// third larger): its first taking always goes; those past the cap
	// are put back at the front of the queue. 4 MiB, the default, is
	// what gRPC clients receive by default. Default 4 MiB.
	MaxMessageBytes int
	// Logger receives what callers are not told (the text of a failure
	// to reach Redis names its address). Default slog.Default().
	Logger *slog.Logger
}

// DefaultMaxMessageBytes is Config.MaxMessageBytes's default.
const DefaultMaxMessageBytes = 4 << 20

// Handler returns the gateway's HTTP handler, mounted at its path
// ("/worqr.gateway.v1.GatewayService/"). Serve it with HTTP/2 (cleartext
// h2c or TLS) for gRPC clients; HTTP/1.1 is enough for JSON and gRPC-Web.
func Handler(cfg Config) (string, http.Handler, error) {
	if cfg.Remote == nil || cfg.Client == nil || cfg.Inspector == nil {
		return "", nil, errors.New("gateway: Config needs Remote, Client and Inspector")
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxMessageBytes < 0 {
		return "", nil, fmt.Errorf("gateway: MaxMessageBytes (%d) must not be negative", cfg.MaxMessageBytes)
	}
	opts := append([]connect.HandlerOption{connect.WithReadMaxBytes(cfg.MaxMessageBytes)}, jsonCodecs()...)
	srv := &server{cfg: cfg}
	if _, err := rand.Read(srv.key[:]); err != nil {
		return "", nil, fmt.Errorf("gateway: session key: %w", err)
	}
	path, h := gatewayv1connect.NewGatewayServiceHandler(srv, opts...)
	if cfg.Token != "" {
		h = bearer(cfg.Token, h, opts)
	}
	return path, conflicts(h), nil
}

// conflicts answers a JSON call refused with failed_precondition (a taking
// or session no longer owned) with HTTP 409 Conflict instead of the 400 the
// Connect protocol maps that code to, so that a plain HTTP client can tell
// it from bad input by status alone. The body is unchanged, and Connect
// clients read the code from it whatever the status. gRPC and gRPC-Web
// responses are left alone (their status travels in trailers).
func conflicts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			h.ServeHTTP(w, r)
			return
		}
		cw := &conflictWriter{ResponseWriter: w}
		h.ServeHTTP(cw, r)
		cw.finish()
	})
}

// conflictWriter holds back the body of a 400 answer until it knows the
// error's code.
type conflictWriter struct {
	http.ResponseWriter
	status int
	held   []byte
}

func (c *conflictWriter) WriteHeader(status int) {
	if status == http.StatusBadRequest && c.status == 0 {
		c.status = status
		return
	}
	if c.status == 0 {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *conflictWriter) Write(b []byte) (int, error) {
	if c.status == http.StatusBadRequest {
		c.held = append(c.held, b...)
		return len(b), nil
	}
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.ResponseWriter.Write(b)
}

// finish writes a held 400 answer: as 409 when its code is
// failed_precondition.
func (c *conflictWriter) finish() {
	if c.status != http.StatusBadRequest {
		return
	}
	var e struct {
		Code string `json:"code"`
	}
	status := http.StatusBadRequest
	if json.Unmarshal(c.held, &e) == nil && e.Code == connect.CodeFailedPrecondition.String() {
		status = http.StatusConflict
	}
	c.ResponseWriter.Header().Set("Content-Length", strconv.Itoa(len(c.held)))
	c.ResponseWriter.WriteHeader(status)
	_, _ = c.ResponseWriter.Write(c.held)
}

// bearer refuses calls without the token, before their body is read: a
// Connect interceptor runs only once the request is read and decoded, so
// a caller without the token could make the gateway read and parse up to
// MaxMessageBytes, or hold a handler while it sent a body it never
// finished. The error is written in the call's protocol, and an
// HTTP/1 connection is closed after it (its body is never read).
func bearer(token string, next http.Handler, opts []connect.HandlerOption) http.Handler {
	want := []byte("Bearer " + token)
	ew := connect.NewErrorWriter(opts...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			if r.ProtoMajor == 1 {
				// Else net/http reads what is left of the body before
				// it answers, to keep the connection.
				w.Header().Set("Connection", "close")
			}
			_ = ew.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New("gateway: missing or wrong bearer token")))
			return
		}
		next.ServeHTTP(w, r)
	})
}

type server struct {
	cfg Config
	// key signs session ids: a session id is "<worker id>.<mac>", so that
	// the worker id, which GetTask, the Inspector, the dashboard and the
	// events publish, does not name the session.
	key [32]byte
}

// sessionID is the id the remote that opened session worker learns.
func (s *server) sessionID(worker string) string {
	return worker + "." + s.mac(worker)
}

func (s *server) mac(worker string) string {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte(worker))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}

// workerOf returns the worker id of session id, or "" when id was not
// made by this gateway.
func (s *server) workerOf(id string) string {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 || !hmac.Equal([]byte(id[i+1:]), []byte(s.mac(id[:i]))) {
		return ""
	}
	return id[:i]
}

var _ gatewayv1connect.GatewayServiceHandler = (*server)(nil)

// toConnect gives each worqr error its code: bad input invalid_argument
// (with a FieldViolation detail), a taking or session no longer owned
// failed_precondition, and so on. Errors worqr does not name (Redis
// unreachable, a timeout) are unavailable: the call may be repeated, and
// every call about a taking answers a repeat as it answered the first.
func (s *server) toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ie *worqr.InvalidError
	var ce *connect.Error
	var oe *net.OpError
	var de *net.DNSError
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.As(err, &oe), errors.As(err, &de):
		// A dial or read error names Redis's host and port; one that timed
		// out is also a context.DeadlineExceeded (net's timeout error says
		// so), which must not pass its text on below.
		ref := xid.New().String()
		s.cfg.Logger.Warn("gateway: Redis unreachable", "ref", ref, "err", err)
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("worqr gateway: Redis is unreachable; try again (ref %s)", ref))
	case errors.As(err, &ie):
		field := requestField(ie.Field)
		e := connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s %s", field, ie.Rule))
		if d, derr := connect.NewErrorDetail(&gatewayv1.FieldViolation{Field: field, Description: ie.Rule}); derr == nil {
			e.AddDetail(d)
		}
		return e
	case errors.Is(err, remote.ErrNotOwner):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, remote.ErrTooManySessions), errors.Is(err, remote.ErrTooManyHeld):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, worqr.ErrTaskNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, worqr.ErrDuplicate):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, errors.New("worqr gateway: the call was cancelled"))
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("worqr gateway: the call's deadline passed"))
	}
	if errors.Is(err, remote.ErrDraining) {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	// Anything else failed on the way to Redis or in it: a dial error, a
	// TLS error, or a reply such as MOVED. Their texts can name Redis's
	// hosts and ports, which are not the remote caller's to know: the
	// gateway's log has the text, under a reference the answer gives.
	ref := xid.New().String()
	var ne net.Error
	if errors.As(err, &ne) {
		s.cfg.Logger.Warn("gateway: Redis unreachable", "ref", ref, "err", err)
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("worqr gateway: Redis is unreachable; try again (ref %s)", ref))
	}
	s.cfg.Logger.Warn("gateway: a call to Redis failed", "ref", ref, "err", err)
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("worqr gateway: a call to Redis failed; try again (ref %s in the gateway's log)", ref))
}

// requestFields names, for the fields worqr's errors name in Go terms,
// the request field a remote sent, as spelled in JSON (lowerCamelCase).
var requestFields = map[string]string{
	"queue name":              "queue",
	"queue name (flow part)":  "queue",
	"queue name (queue part)": "queue",
	"EnqueueOpts.ID":          "id",
	"EnqueueOpts.UniqueKey":   "uniqueKey",
	"EnqueueOpts.UniqueTTL":   "uniqueTtlMs",
	"EnqueueOpts.Delay":       "delayMs",
	"EnqueueOpts.MaxAttempts": "maxAttempts",
	"EnqueueOpts.Timeout":     "timeoutMs",
	"wait":                    "waitMs",
	"retry_in":                "retryInMs",
	"sleep":                   "sleepMs",
	"Flow.Name":               "flow",
	"sigID":                   "id",
	"session_id":              "sessionId",
	"request_id":              "requestId",
	"check_running":           "checkRunning",
}

// requestField is the request field a remote sent for field, as named by a
// worqr error (Go terms) or by the gateway: the remote finds it in the
// request it sent. An indexed field ("queues[2]") keeps its index.
func requestField(field string) string {
	if f, ok := requestFields[field]; ok {
		return f
	}
	if i := strings.IndexByte(field, '['); i > 0 {
		if f, ok := requestFields[field[:i]]; ok {
			return f + field[i:]
		}
	}
	return field
}

func (s *server) bad(field, rule string) error {
	return s.toConnect(&worqr.InvalidError{Field: field, Rule: rule})
}

func ms(d uint32) time.Duration { return time.Duration(d) * time.Millisecond }

// maxSleepMs bounds a Forward's sleepMs, so that it fits a time.Duration.
const maxSleepMs = 100 * 365 * 24 * 3600 * 1000

func (s *server) Enqueue(ctx context.Context, req *connect.Request[gatewayv1.EnqueueRequest]) (*connect.Response[gatewayv1.EnqueueResponse], error) {
	m := req.Msg
	var opts *worqr.EnqueueOpts
	if m.DelayMs != 0 || m.MaxAttempts != 0 || m.TimeoutMs != 0 || m.UniqueKey != "" || m.UniqueTtlMs != 0 || m.Id != "" {
		opts = &worqr.EnqueueOpts{Delay: ms(m.DelayMs), MaxAttempts: int(m.MaxAttempts), Timeout: ms(m.TimeoutMs),
			UniqueKey: m.UniqueKey, UniqueTTL: ms(m.UniqueTtlMs), ID: m.Id}
	}
	id, err := s.cfg.Client.Enqueue(ctx, m.Queue, m.Payload, opts)
	if err != nil && !(id != "" && errors.Is(err, worqr.ErrNotReplicated)) {
		return nil, s.toConnect(err)
	}
	res := connect.NewResponse(&gatewayv1.EnqueueResponse{Id: id})
	s.notReplicated(res.Header(), err, 1)
	return res, nil
}

func (s *server) Signal(ctx context.Context, req *connect.Request[gatewayv1.SignalRequest]) (*connect.Response[gatewayv1.SignalResponse], error) {
	m := req.Msg
	if m.RunId == "" {
		return nil, s.bad("runId", "is empty")
	}
	now, err := s.cfg.Client.Signal(ctx, &worqr.Flow{Name: m.Flow}, m.RunId, m.Name, m.Payload, m.Id)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&gatewayv1.SignalResponse{Delivered: now}), nil
}

func (s *server) EnqueueBatch(ctx context.Context, req *connect.Request[gatewayv1.EnqueueBatchRequest]) (*connect.Response[gatewayv1.EnqueueBatchResponse], error) {
	if len(req.Msg.Payloads) == 0 {
		return nil, s.bad("payloads", "is empty")
	}
	ids, err := s.cfg.Client.EnqueueBatch(ctx, req.Msg.Queue, req.Msg.Payloads, nil)
	var be *worqr.BatchError
	if errors.As(err, &be) && be.Enqueued > 0 {
		// A large batch goes in steps: the first ones are in. Say how
		// many (an unavailable would have the caller send them all
		// again, twice over).
		ref := xid.New().String()
		s.cfg.Logger.Warn("gateway: enqueue batch stopped part way", "ref", ref, "enqueued", be.Enqueued, "total", be.Total, "err", err)
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf(
			"worqr gateway: %d of the %d payloads are enqueued (the first ones, in order); the rest may or may not be (ref %s in the gateway's log)", be.Enqueued, be.Total, ref))
	}
	if err != nil && !(len(ids) == len(req.Msg.Payloads) && errors.Is(err, worqr.ErrNotReplicated)) {
		return nil, s.toConnect(err)
	}
	res := connect.NewResponse(&gatewayv1.EnqueueBatchResponse{Ids: ids})
	s.notReplicated(res.Header(), err, len(ids))
	return res, nil
}

// notReplicated marks the answer of an enqueue applied on the primary but
// acknowledged by too few replicas (err matches worqr.ErrNotReplicated):
// the tasks ARE enqueued, so the caller gets their ids (an error would
// make it enqueue them again), and the header Worqr-Not-Replicated says
// they are lost if the primary fails before a replica gets them.
func (s *server) notReplicated(h http.Header, err error, n int) {
	if err == nil {
		return
	}
	s.cfg.Logger.Warn("gateway: enqueue not acknowledged by enough replicas", "count", n, "err", err)
	h.Set("Worqr-Not-Replicated", "1")
}

func (s *server) Cancel(ctx context.Context, req *connect.Request[gatewayv1.CancelRequest]) (*connect.Response[gatewayv1.CancelResponse], error) {
	if req.Msg.Id == "" {
		return nil, s.bad("id", "is empty")
	}
	st, err := s.cfg.Client.Cancel(ctx, req.Msg.Queue, req.Msg.Id)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&gatewayv1.CancelResponse{Status: st.String()}), nil
}

func (s *server) GetTask(ctx context.Context, req *connect.Request[gatewayv1.GetTaskRequest]) (*connect.Response[gatewayv1.GetTaskResponse], error) {
	if req.Msg.Id == "" {
		return nil, s.bad("id", "is empty")
	}
	if req.Msg.Queue == "" {
		// Refused as it always was: Inspector.Task would search every
		// queue, where GetTask reads one queue's task in one lookup.
		return nil, s.toConnect(worqr.CheckQueueName(""))
	}
	t, err := s.cfg.Inspector.Task(ctx, req.Msg.Queue, req.Msg.Id)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&gatewayv1.GetTaskResponse{Task: &gatewayv1.TaskInfo{
		Id: t.ID, Queue: t.Queue, Payload: t.Payload, State: string(t.State), Failures: uint32(t.Failures),
		Crashes: uint32(t.Crashes), LastError: t.LastError, DeadReason: t.DeadReason, Result: t.Result,
		Progress: t.Progress, WorkerId: t.WorkerID, Pid: t.PID, CancelRequested: t.CancelRequested,
	}}), nil
}

func (s *server) QueueStats(ctx context.Context, req *connect.Request[gatewayv1.QueueStatsRequest]) (*connect.Response[gatewayv1.QueueStatsResponse], error) {
	var qs []worqr.QueueInfo
	if req.Msg.Queue == "" {
		all, err := s.cfg.Inspector.Queues(ctx)
		if err != nil {
			return nil, s.toConnect(err)
		}
		qs = all
	} else {
		q, err := s.cfg.Inspector.Queue(ctx, req.Msg.Queue)
		if err != nil {
			return nil, s.toConnect(err)
		}
		qs = []worqr.QueueInfo{*q}
	}
	out := &gatewayv1.QueueStatsResponse{}
	for _, q := range qs {
		out.Queues = append(out.Queues, &gatewayv1.QueueStat{Name: q.Name, Flow: q.Flow, Waiting: count(q.Waiting),
			Scheduled: count(q.Scheduled), Active: count(q.Active), Dead: count(q.Dead), Retained: count(q.Retained),
			Paused: q.Paused, LatencyMs: uint32(min(q.Latency.Milliseconds(), 1<<32-1)),
			Behind: count(q.Behind), Keys: count(q.Keys), OldestActiveMs: uint32(min(q.OldestActive.Milliseconds(), 1<<32-1))})
	}
	return connect.NewResponse(out), nil
}

// count is n as a QueueStat count: a uint32, so that JSON carries it as a
// number (64-bit integers are strings there), saturated at 4294967295.
func count(n int64) uint32 {
	return uint32(min(max(n, 0), 1<<32-1))
}

func (s *server) OpenSession(ctx context.Context, req *connect.Request[gatewayv1.OpenSessionRequest]) (*connect.Response[gatewayv1.OpenSessionResponse], error) {
	name := req.Msg.Name
	if name == "" {
		name = req.Peer().Addr
	}
	sess, err := s.cfg.Remote.Open(ctx, remote.OpenOpts{Name: name, Queues: req.Msg.Queues})
	if err != nil {
		return nil, s.toConnect(err)
	}
	ttl := sess.TTL()
	return connect.NewResponse(&gatewayv1.OpenSessionResponse{SessionId: s.sessionID(sess.ID()),
		TtlMs: uint32(ttl.Milliseconds()), BeatMs: uint32((ttl / 3).Milliseconds())}), nil
}

// session finds the session a call names.
func (s *server) session(id string) (*remote.Session, error) {
	if id == "" {
		return nil, s.bad("session_id", "is empty")
	}
	worker := s.workerOf(id)
	if worker == "" {
		return nil, s.toConnect(fmt.Errorf("%w: %s", remote.ErrSessionLost, id))
	}
	sess, err := s.cfg.Remote.Session(worker)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return sess, nil
}

func (s *server) Beat(ctx context.Context, req *connect.Request[gatewayv1.BeatRequest]) (*connect.Response[gatewayv1.BeatResponse], error) {
	sess, err := s.session(req.Msg.SessionId)
	if err != nil {
		return nil, err
	}
	var running []string
	if req.Msg.CheckRunning {
		running = append([]string{}, req.Msg.Running...)
	}
	rep, err := sess.Beat(ctx, running)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&gatewayv1.BeatResponse{Lost: rep.Lost, Cancel: rep.Cancel, Drain: rep.Drain}), nil
}

func (s *server) Take(ctx context.Context, req *connect.Request[gatewayv1.TakeRequest]) (*connect.Response[gatewayv1.TakeResponse], error) {
	sess, err := s.session(req.Msg.SessionId)
	if err != nil {
		return nil, err
	}
	n := int(req.Msg.Max)
	if n == 0 {
		n = 1
	}
	// The reply's cap counts the bytes it is sent as: a taking weighs its
	// encoding, in JSON or in protobuf as the call came.
	size, envelope := protoSize, 0
	if strings.Contains(req.Header().Get("Content-Type"), "json") {
		// {"takings":[]}
		size, envelope = jsonSize, len(orNil(jsonOut.Marshal(&gatewayv1.TakeResponse{})))
	}
	ks, err := sess.Take(ctx, remote.TakeRequest{Queue: req.Msg.Queue, Max: n, Wait: ms(req.Msg.WaitMs), RequestID: req.Msg.RequestId,
		MaxBytes: max(s.cfg.MaxMessageBytes-envelope, 1), Size: size})
	if err != nil {
		return nil, s.toConnect(err)
	}
	out := &gatewayv1.TakeResponse{Takings: make([]*gatewayv1.Taking, len(ks))}
	for i := range ks {
		out.Takings[i] = taking(&ks[i], true)
	}
	return connect.NewResponse(out), nil
}

// taking is k as a reply carries it; without its bytes fields (payloads,
// children's results) unless withBytes.
func taking(k *remote.Taking, withBytes bool) *gatewayv1.Taking {
	bytes := func(b []byte) []byte {
		if withBytes {
			return b
		}
		return nil
	}
	t := &gatewayv1.Taking{Pid: k.PID, TaskId: k.TaskID, Queue: k.Queue, Payload: bytes(k.Payload),
		Attempt: uint32(k.Attempt), MaxAttempts: uint32(k.MaxAttempts), Crashes: uint32(k.Crashes),
		TimeoutMs: uint32(min(k.Timeout.Milliseconds(), 1<<32-1)), State: k.State, Parent: k.Parent, Key: k.Key,
		Type: k.Type, Traceparent: k.TraceParent, Tracestate: k.TraceState}
	for _, p := range k.Payloads {
		t.Payloads = append(t.Payloads, &gatewayv1.MergedPayload{Data: bytes(p.Data), Score: p.Score})
	}
	for _, c := range k.Children {
		t.Children = append(t.Children, &gatewayv1.ChildResult{Id: c.ID, Queue: c.Queue, Status: c.Status, Result: bytes(c.Result), Error: c.Err})
	}
	return t
}

// protoSize is how many bytes k adds to a TakeResponse in protobuf: its
// message, and the tag and length that frame it in the repeated field.
func protoSize(k *remote.Taking) int {
	n := proto.Size(taking(k, true))
	return protowire.SizeTag(1) + protowire.SizeVarint(uint64(n)) + n
}

// jsonSize is how many bytes k adds to a TakeResponse in JSON: the taking
// without its bytes fields, marshalled as the reply is, plus the base64 of
// those bytes (protojson writes them in standard base64, which needs no
// escaping), plus the ", " that parts it from the one before. The bytes
// are not encoded twice.
func jsonSize(k *remote.Taking) int {
	b64 := base64.StdEncoding.EncodedLen
	n := len(orNil(jsonOut.Marshal(taking(k, false)))) + 2 + b64(len(k.Payload))
	for _, p := range k.Payloads {
		n += b64(len(p.Data))
	}
	for _, c := range k.Children {
		n += b64(len(c.Result))
	}
	return n
}

// orNil is b, or nil when err is set: a taking that does not marshal (a
// string that is not UTF-8) fails the reply's marshal too, whatever it
// weighs.
func orNil(b []byte, err error) []byte {
	if err != nil {
		return nil
	}
	return b
}

// end runs one end of a taking named by session and pid.
func (s *server) end(sessionID, pid string, f func(*remote.Session) (worqr.EventKind, error)) (*connect.Response[gatewayv1.EndResponse], error) {
	if pid == "" {
		return nil, s.bad("pid", "is empty")
	}
	sess, err := s.session(sessionID)
	if err != nil {
		return nil, err
	}
	out, err := f(sess)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&gatewayv1.EndResponse{Outcome: string(out)}), nil
}

func (s *server) Finish(ctx context.Context, req *connect.Request[gatewayv1.FinishRequest]) (*connect.Response[gatewayv1.EndResponse], error) {
	m := req.Msg
	return s.end(m.SessionId, m.Pid, func(sess *remote.Session) (worqr.EventKind, error) {
		return sess.Finish(ctx, m.Pid, m.Result)
	})
}

func (s *server) Fail(ctx context.Context, req *connect.Request[gatewayv1.FailRequest]) (*connect.Response[gatewayv1.EndResponse], error) {
	m := req.Msg
	return s.end(m.SessionId, m.Pid, func(sess *remote.Session) (worqr.EventKind, error) {
		return sess.Fail(ctx, m.Pid, m.Error, ms(m.RetryInMs))
	})
}

func (s *server) GiveBack(ctx context.Context, req *connect.Request[gatewayv1.GiveBackRequest]) (*connect.Response[gatewayv1.EndResponse], error) {
	m := req.Msg
	return s.end(m.SessionId, m.Pid, func(sess *remote.Session) (worqr.EventKind, error) {
		return sess.GiveBack(ctx, m.Pid)
	})
}

func (s *server) Bury(ctx context.Context, req *connect.Request[gatewayv1.BuryRequest]) (*connect.Response[gatewayv1.EndResponse], error) {
	m := req.Msg
	return s.end(m.SessionId, m.Pid, func(sess *remote.Session) (worqr.EventKind, error) {
		return sess.Bury(ctx, m.Pid, m.Reason)
	})
}

func (s *server) Forward(ctx context.Context, req *connect.Request[gatewayv1.ForwardRequest]) (*connect.Response[gatewayv1.EndResponse], error) {
	m := req.Msg
	if m.SleepMs > maxSleepMs {
		return nil, s.bad("sleepMs", fmt.Sprintf("(%d) must be at most %d (100 years)", m.SleepMs, maxSleepMs))
	}
	return s.end(m.SessionId, m.Pid, func(sess *remote.Session) (worqr.EventKind, error) {
		return sess.ForwardAfter(ctx, m.Pid, m.Fields, time.Duration(m.SleepMs)*time.Millisecond, m.Again, m.Await)
	})
}

func (s *server) FanOut(ctx context.Context, req *connect.Request[gatewayv1.FanOutRequest]) (*connect.Response[gatewayv1.EndResponse], error) {
	m := req.Msg
	children := make([]worqr.ChildSpec, len(m.Children))
	for i, c := range m.Children {
		if c == nil {
			return nil, s.bad(fmt.Sprintf("children[%d]", i), "is null")
		}
		children[i] = worqr.ChildSpec{Queue: c.Queue, Payload: c.Payload}
	}
	return s.end(m.SessionId, m.Pid, func(sess *remote.Session) (worqr.EventKind, error) {
		return sess.FanOut(ctx, m.Pid, m.Fields, children)
	})
}

func (s *server) CloseSession(ctx context.Context, req *connect.Request[gatewayv1.CloseSessionRequest]) (*connect.Response[gatewayv1.CloseSessionResponse], error) {
	sess, err := s.session(req.Msg.SessionId)
	if err != nil {
		return nil, err
	}
	if err := sess.Close(ctx); err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&gatewayv1.CloseSessionResponse{}), nil
}

// NewServer returns an http.Server for the gateway's handler on addr,
// speaking HTTP/1.1 and HTTP/2 (cleartext h2c too, for gRPC without TLS).
// Other paths answer 404; "/healthz" answers 200.
func NewServer(addr string, cfg Config) (*http.Server, error) {
	path, h, err := Handler(cfg)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(path, h)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Remote.Draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Addr: addr, Handler: mux, Protocols: p, ReadHeaderTimeout: 10 * time.Second,
		// (No read or write timeout: a Take waits up to MaxWait for work.)
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: nil}, nil
}
