// Package postgres is the "postgres" endpoint: a PostgreSQL database as a
// source (pg_dump in custom or plain format, or table by table on one
// exported snapshot with jobs > 1) and as a sink (pg_restore, psql, or the
// tables' data in parallel between the schema and its indexes).
//
// Passwords never reach a command line: the tools get them in their
// environment (PGPASSWORD) and the connection string without them. Table
// data in parallel mode moves as COPY text, through pgx.
//
// It imports the plugin SDK and plugins/internal/command only.
package postgres
