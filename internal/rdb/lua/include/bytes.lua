-- bytes: the byte bounds of a call.
-- COPY_BYTES is about what one call may copy through Lua (payloads read
-- and written by a take, a merge, a dead task's requeue, a bulk cancel):
-- about 2 ms of Redis per MiB. FREE_BYTES is what one call may free
-- (deletes are cheaper per byte).
local COPY_BYTES, FREE_BYTES = 1048576, 67108864
