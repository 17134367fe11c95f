package all

import "github.com/pipebackup/pipe/plugins/database/mysql"

func init() {
	add("mysql", mysql.SourceType{}, mysql.SinkType{})
	add("mariadb_backup", mysql.PhysicalSourceType{}, mysql.PhysicalSinkType{})
}
