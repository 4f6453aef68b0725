// Package remote serves worqr queues to workers in other processes or
// languages; the gateway module puts it on gRPC, gRPC-Web and JSON.
//
// A Server opens Sessions. Each Session is a worqr worker: a worker id
// whose keepalive its remote renews by calling Beat, that takes with the
// same script and deadline fence as a worqr.Worker, and ends each taking by
// its pid, the fencing token, through the same batched end call and the
// same outcome policy (retries, backoff, the dead set, a stage's forward
// and fan-out). A call about a taking the session no longer owns fails
// with ErrNotOwner and changes nothing; a call repeated after its reply
// was lost answers as the first did.
package remote
