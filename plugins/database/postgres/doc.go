// Package postgres holds pipe's PostgreSQL endpoints:
//
//   - "postgres", a database as a source (pg_dump in custom or plain
//     format, or table by table on one exported snapshot with jobs > 1)
//     and as a sink (pg_restore, psql, or the tables' data in parallel
//     between the schema and its indexes); with databases = [...] a whole
//     server (pg_dumpall's globals, then each database on its own);
//   - "postgres_basebackup", a physical base backup over the replication
//     protocol as a source (BASE_BACKUP of PostgreSQL 13 to 18: the data
//     directory, each tablespace and the server's backup manifest, with
//     the WAL range and any damaged page the server reports as facts) and
//     its restore into an empty data directory as a sink (tablespaces
//     linked from pg_tblspc, recovery settings written last).
//
// Passwords never reach a command line: the tools get them in their
// environment (PGPASSWORD) and the connection string without them. Table
// data in parallel mode moves as COPY text, through pgx; base backups
// through pgx's protocol layer and pglogrepl.
//
// It imports the plugin SDK and plugins/internal only, never the engine or
// another plugin.
package postgres
