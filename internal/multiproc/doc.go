// Package multiproc holds tests of several Norn processes sharing one
// PostgreSQL database: messages crossing processes (LISTEN/NOTIFY wake-ups),
// take-over after a kill -9, and a database restart mid-run. It has no code
// of its own; the tests re-run their own binary as the second process.
package multiproc
