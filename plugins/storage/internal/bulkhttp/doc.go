// Package bulkhttp is the HTTP transport the s3, gcs and azure endpoints
// move objects through: tuned for bulk transfer, and with a stall timeout
// instead of a deadline on whole requests.
//
// NewTransport speaks HTTP/1.1 over many connections (one per part in
// flight: multiplexing parts over one HTTP/2 connection would serialise
// them, and a stall is then a connection's), keeps an idle pool large
// enough that parallel parts reuse connections instead of dialling new
// ones (Go's default keeps 2 per host), moves data through large buffers,
// never asks for transparent compression (the data is compressed and
// encrypted already, and a ranged read must get the stored bytes), and
// takes its proxy from the environment.
//
// Its stall timeout fails a request whose connection moved no byte, in
// either direction, for the timeout: connecting, sending, waiting for the
// answer, receiving. A slow transfer that moves is never cut, time the
// caller spends not reading an answer (backpressure) does not count, and
// on Linux bytes the kernel still sends from the socket's buffers count as
// moving (see stallConn). A stall shows as a *StallError, which store
// clients retry like a dropped connection.
//
// Each endpoint keeps its own defaults (pool size, timeouts) and its SDK's
// wiring. This package must not import the engine, the runner or another
// plugin: it imports the standard library and golang.org/x/sys only.
package bulkhttp
