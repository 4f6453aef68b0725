package rdb

// Limits that keep every script call short (a few milliseconds at most).
const (
	// MaxEnqueueChunk is the most tasks one enqueue script call writes;
	// EnqueueBatch splits larger batches.
	MaxEnqueueChunk = 1000
	// MaxEnqueueChunkBytes caps the payload bytes of one enqueue call.
	MaxEnqueueChunkBytes = 4 << 20
	// MaxTake is the most tasks one take script call pops.
	MaxTake = 1000
	// RequeueChunk is the most takings one requeue script call puts back;
	// Requeue calls it again until none are left. Each costs about ten
	// commands, as a BulkStep's task does.
	RequeueChunk = 250
	// RequeueWorkers is the most workers one requeue script call names:
	// each call reads every worker it names, emptied or not, before it
	// moves any taking.
	RequeueWorkers = 100
	// BulkChunk is the most tasks one page of a listing holds.
	BulkChunk = 1000
	// BulkStep is the most tasks one call of a bulk write handles (a
	// dead-set operation, Bulk): each costs about ten commands, and no
	// call may hold Redis for more than a few milliseconds.
	BulkStep = 250
	// TrimDead is the most dead entries of each kind (over the set's
	// count cap, older than its age cap) one call deletes by itself
	// (TRIM_DEAD in lua/include/bury.lua): each deletes a task's hash
	// and what its key holds.
	TrimDead = 250
	// EnqueueStep is the most tasks of one script call when a batch is
	// larger than MaxEnqueueChunk and must be split anyway: short calls,
	// many on the wire, so that none holds Redis for more than about a
	// millisecond and the per-call cost stays small against the per-task
	// one.
	EnqueueStep = 250
	// enqueueWindow is how many enqueue chunks travel at once on the wire.
	enqueueWindow = 16
)
