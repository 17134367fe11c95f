package all

import "github.com/pipebackup/pipe/plugins/database/postgres"

func init() {
	add("postgres", postgres.SourceType{}, postgres.SinkType{})
	add("postgres_basebackup", postgres.BaseSourceType{}, postgres.BaseSinkType{})
}
