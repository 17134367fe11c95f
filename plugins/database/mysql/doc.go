// Package mysql is the "mysql" endpoint: a MariaDB or MySQL database as a
// source (a logical dump by mariadb-dump or mysqldump, one consistent
// InnoDB snapshot taken with --single-transaction) and as a sink (the dump
// fed to the mariadb or mysql client, which stops at the first statement
// the server rejects and fails the object with the server's message).
//
// It runs the client programs through plugins/internal/command and talks
// SQL only through them: no Go driver. Connection settings, the password
// above all, reach the programs in a temporary option file (mode 0600,
// removed when the program ends) named by --defaults-extra-file, never on a
// command line or in the environment.
//
// It imports the plugin SDK and plugins/internal/command only, never the
// engine or another plugin.
package mysql
