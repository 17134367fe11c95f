package all

import "github.com/pipebackup/pipe/plugins/storage/gcs"

func init() { add("gcs", gcs.SourceType{}, gcs.SinkType{}) }
